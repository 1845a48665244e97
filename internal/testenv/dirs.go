package testenv

import (
	"os"
	"testing"
)

// ShortDir returns a new directory directly under /tmp, removed when the
// test ends. t.TempDir paths are too long for unix socket names (108 bytes
// of sun_path), so tests that listen on sockets use this instead.
func ShortDir(t testing.TB, prefix string) string {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}
