// Package shim starts a real runtime-shim on the Docker Engine for tests of
// the services that talk CRI to it, reached through cri-client as nodeapi and
// the kubelet reach a runtime. Every Docker object carries a per-test
// instance label and is removed, with the images pulled, when the test ends.
//
//	s := shim.Start(t, "logs")
//	id, err := s.Runtime.RunPodSandbox(ctx, cfg, "")
//	... Image: &runtimeapi.ImageSpec{Image: s.Busybox} ...
package shim
