package runner

import (
	"context"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// containerEngine is the part of the Docker Engine API that a sandbox's
// life from start to removal goes through: creating, attaching to and
// starting a sandbox (startBox, for the pool and for cold runs), removing
// one (removeLater, the reaper) and listing this instance's (the reaper,
// Cleanup). *client.Client implements it; the unit tests of the pool and
// the reaper use a fake. Everything else (images, networks, volumes,
// limits, kills, waits) goes through Runner.cli.
type containerEngine interface {
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error)
	ContainerAttach(ctx context.Context, containerID string, options container.AttachOptions) (types.HijackedResponse, error)
	ContainerStart(ctx context.Context, containerID string, options container.StartOptions) error
	ContainerRemove(ctx context.Context, containerID string, options container.RemoveOptions) error
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
}

// ours lists every container of this instance, running or not.
func (r *Runner) ours(ctx context.Context) ([]container.Summary, error) {
	return r.ctr.ContainerList(ctx, container.ListOptions{
		All: true,
		Filters: filters.NewArgs(
			filters.Arg("label", LabelManaged+"=true"),
			filters.Arg("label", LabelInstance+"="+r.instance),
		),
	})
}

// removeNow force-removes container cid with its anonymous volumes.
func (r *Runner) removeNow(ctx context.Context, cid string) error {
	return r.ctr.ContainerRemove(ctx, cid, container.RemoveOptions{Force: true, RemoveVolumes: true})
}

// clock is the time of the runner's background work: the pool's waits
// and sizing, the quiet scheduler, removal retries and the reaper's grace.
// realClock is the system's; unit tests use a fake that moves only when
// told to.
type clock interface {
	Now() time.Time
	// NewTimer returns a channel that receives once d has passed, and a
	// func that stops the timer (time.Timer's C and Stop).
	NewTimer(d time.Duration) (<-chan time.Time, func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// sleep waits d on c.
func sleep(c clock, d time.Duration) {
	ch, _ := c.NewTimer(d)
	<-ch
}
