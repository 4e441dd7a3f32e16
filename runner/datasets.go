package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"
)

// DatasetMount is a dataset an exec mounts: the host directory Path,
// read-only, nosuid, nodev and noexec, at /data/<Name>.
type DatasetMount struct {
	Name string
	Path string
}

// datasetsDir is where datasets appear in the sandbox.
const datasetsDir = "/data"

// datasetMountOptions are the mount flags of every dataset.
const datasetMountOptions = "bind,ro,nosuid,nodev,noexec"

// datasetVolume names the engine volume that binds a dataset: one per
// instance, dataset and path (a path changed by a reload gets a new one).
func datasetVolume(instance string, d DatasetMount) string {
	sum := sha256.Sum256([]byte(d.Path))
	return fmt.Sprintf("sandboxd-ds-%s-%s-%s", instance, d.Name, hex.EncodeToString(sum[:6]))
}

// datasetMounts are the container mounts of spec's datasets. The bind
// itself is made on the host by the engine's local volume driver with the
// flags above (the engine's bind mounts cannot carry nosuid, nodev and
// noexec), and the container's bind of the volume copies those flags from
// it. The container mount is deliberately not marked read-only to the
// engine: the runtime would then remount it with MS_RDONLY alone, which
// clears nosuid, nodev and noexec; the copied flags already make it
// read-only, and the sandbox has no capability to remount it (the e2e test
// reads the flags from /proc/self/mountinfo and tries a write).
func datasetMounts(spec *Spec, instance string) []mount.Mount {
	var out []mount.Mount
	for _, d := range spec.Datasets {
		out = append(out, mount.Mount{
			Type: mount.TypeVolume, Source: datasetVolume(instance, d), Target: datasetsDir + "/" + d.Name,
			VolumeOptions: &mount.VolumeOptions{NoCopy: true},
		})
	}
	return out
}

// ensureDatasetVolumes creates the volumes spec's datasets need (creating
// an existing one is a no-op for the engine).
func (r *Runner) ensureDatasetVolumes(ctx context.Context, spec *Spec) error {
	for _, d := range spec.Datasets {
		_, err := r.cli.VolumeCreate(ctx, volume.CreateOptions{
			Name:       datasetVolume(r.instance, d),
			Driver:     "local",
			DriverOpts: map[string]string{"type": "none", "device": d.Path, "o": datasetMountOptions},
			Labels:     map[string]string{LabelManaged: "true", LabelInstance: r.instance, "sandboxd.dataset": d.Name},
		})
		if err != nil {
			return fmt.Errorf("%w: creating the volume of dataset %s: %v", ErrEngine, d.Name, err)
		}
	}
	return nil
}

// removeDatasetVolumes removes this instance's dataset volumes (at
// shutdown, when no container uses them).
func (r *Runner) removeDatasetVolumes(ctx context.Context) error {
	list, err := r.cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", LabelManaged+"=true"), filters.Arg("label", LabelInstance+"="+r.instance), filters.Arg("label", "sandboxd.dataset"))})
	if err != nil {
		return err
	}
	for _, v := range list.Volumes {
		if err := r.cli.VolumeRemove(ctx, v.Name, true); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("removing dataset volume %s: %w", v.Name, err)
		}
	}
	return nil
}
