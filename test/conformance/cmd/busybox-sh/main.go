// Command busybox-sh is /bin/sh of the conformance harness's busybox image.
// It runs busybox's ash, as upstream's image does, unless the environment
// holds a variable whose name is not a shell identifier ("p-data-1",
// "1-data-1", "$_-data-1": the envFrom specs' prefixes): Debian's ash drops
// those before it runs a command, where upstream's image passes them on, so
// then it runs bash (Debian's bash-static, POSIX mode under the name sh),
// which keeps them. Either way the shell gets this program's own argv and
// environment (so error messages name the shell as it was called).
package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/microlet/microlet/test/conformance/busyboxsh"
)

func main() {
	env := os.Environ()
	shell := busyboxsh.Ash
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); !identifier(name) {
			shell = busyboxsh.Bash
			break
		}
	}
	argv := os.Args
	if len(argv) == 0 {
		argv = []string{"sh"}
	}
	err := syscall.Exec(shell, argv, env)
	fmt.Fprintf(os.Stderr, "%s: exec %s: %v\n", argv[0], shell, err)
	os.Exit(127)
}

// identifier reports whether name is a POSIX shell variable name.
func identifier(name string) bool {
	if name == "" {
		return false
	}
	for i, c := range name {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
