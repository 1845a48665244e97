// Package busyboxsh holds where the conformance busybox image keeps its two
// shells, shared by the image builder (package conformance) and the image's
// /bin/sh (cmd/busybox-sh), which picks one of them per invocation.
package busyboxsh

// Paths in the busybox image.
const (
	// Ash is busybox itself, run as its sh applet.
	Ash = "/bin/busybox"
	// Bash is Debian's bash-static, run as sh (POSIX mode).
	Bash = "/usr/libexec/busybox-sh/bash"
)
