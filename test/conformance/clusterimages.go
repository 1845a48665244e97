package conformance

import (
	"context"
	"fmt"
	"io"

	"github.com/microlet/microlet/internal/testenv/registry"
	"github.com/microlet/microlet/test/cluster"
)

// LoadClusterImages makes the test images available on every node of a
// make cluster cluster, offline: it builds them into this machine's
// Docker (PrepareImages), loads them into each node's containerd
// (cluster.Load, as kind load does) and pushes MirrorImages to the cluster
// registry, where the nodes' containerd finds what the suite pulls with
// pullPolicy Always.
func LoadClusterImages(ctx context.Context, cl *cluster.Cluster, src ImageSources, log io.Writer) error {
	if err := PrepareImages(ctx, src, log); err != nil {
		return err
	}
	names, err := ImageNames(src)
	if err != nil {
		return err
	}
	if err := cluster.Load(ctx, cl.Config, names...); err != nil {
		return err
	}
	imgs, err := MirrorOCIImages(src)
	if err != nil {
		return err
	}
	reg := registry.Remote(cl.RegistryHost())
	for repoTag, img := range imgs {
		if err := reg.Push(ctx, repoTag, img); err != nil {
			return fmt.Errorf("cluster registry %s: %w", cl.RegistryHost(), err)
		}
	}
	return nil
}
