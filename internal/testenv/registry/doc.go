// Package registry runs a local OCI registry on 127.0.0.1 for tests and
// fills it with tiny images built from Debian's busybox-static (/bin/busybox).
// Docker treats 127.0.0.0/8 registries as insecure, so the real Docker
// Engine pulls from it without configuration; no image ever comes from the
// internet.
//
//	r := registry.Start(t)                 // stopped by t.Cleanup
//	img := r.Image(registry.Busybox)       // "127.0.0.1:PORT/microlet/busybox:1.0"
//	web := r.Image(registry.WebServer)     // busybox httpd serving a page on :80
//
// Every image carries the label LabelRegistry=<host>, so a test can find and
// remove what Docker pulled from this registry (DockerImageFilter).
// MirrorCritest additionally pushes the images the CRI validation suite
// (critest) asks for, under the names critest derives with -registry-prefix.
package registry
