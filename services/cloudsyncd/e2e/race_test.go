//go:build race

package e2e

// The binaries under test get the race detector too.
func init() { buildFlags = append(buildFlags, "-race") }
