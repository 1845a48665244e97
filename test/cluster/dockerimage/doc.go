// Package dockerimage builds Docker images without a registry or a
// Dockerfile: a root filesystem written as a tar (a base directory tree,
// host files and in-memory files on top, owned by root, fixed times, a
// stable order) and brought in with `docker import`. Each image carries a
// label with the hash of its tar and configuration, and an image whose
// label already matches is not imported again, so a build is cached by its
// content.
//
//	err := dockerimage.Import(ctx, dockerimage.Spec{
//		Name:    "microlet.local/tool:1",
//		Base:    rootfsDir,
//		Files:   map[string]string{"usr/local/bin/tool": "/path/to/tool"},
//		Changes: []string{dockerimage.EnvPath, `ENTRYPOINT ["/usr/local/bin/tool"]`},
//	}, os.Stderr)
//
// The cluster add-ons (test/cluster/addons) and the cluster's node image
// (test/cluster) are built this way.
package dockerimage
