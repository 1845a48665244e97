//go:build race

package server_test

// The binary under test gets the race detector too.
func init() { buildFlags = append(buildFlags, "-race") }
