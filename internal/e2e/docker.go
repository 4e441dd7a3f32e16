package e2e

import (
	"context"
	"fmt"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

// Labels sandboxd puts on its containers (the suites' own copy of that
// contract).
const (
	labelManaged  = "sandboxd.managed"
	labelInstance = "sandboxd.instance"
	LabelExecID   = "sandboxd.exec-id"
	// Managed selects sandboxd's containers, for ListContainers.
	Managed = labelManaged + "=true"
)

// Instance selects the containers of one sandboxd instance, for
// ListContainers.
func Instance(id string) string { return labelInstance + "=" + id }

// Docker returns a client of the engine the environment names (DOCKER_HOST
// or the default socket) after checking that it answers.
func Docker() (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		cli.Close()
		return nil, fmt.Errorf("the Docker engine does not answer (%v); the end-to-end suites need it", err)
	}
	return cli, nil
}

// ListContainers lists the containers, running or not, that carry every
// one of labels ("name=value").
func ListContainers(ctx context.Context, cli *client.Client, labels ...string) ([]container.Summary, error) {
	args := filters.NewArgs()
	for _, l := range labels {
		args.Add("label", l)
	}
	return cli.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
}

// describe names a container for a failure message: id, name, state and
// exec id.
func describe(c container.Summary) string {
	name := ""
	if len(c.Names) > 0 {
		name = c.Names[0]
	}
	return fmt.Sprintf("%s %s (%s, exec-id %s)", c.ID[:12], name, c.State, c.Labels[LabelExecID])
}

// WaitGone polls list until none of the containers it returns matches sel,
// for up to timeout, and describes those left at the deadline (a listing
// error is one of them).
func WaitGone(timeout time.Duration, list func(context.Context) ([]container.Summary, error), sel func(container.Summary) bool) []string {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cs, err := list(ctx)
		cancel()
		var left []string
		if err != nil {
			left = append(left, "listing containers: "+err.Error())
		}
		for _, c := range cs {
			if sel(c) {
				left = append(left, describe(c))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Any selects every container, for WaitGone.
func Any(container.Summary) bool { return true }
