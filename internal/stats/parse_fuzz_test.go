package stats

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

func TestParseFlatKeyed(t *testing.T) {
	m := parseFlatKeyed([]byte("anon 10\n  file\t20\nnegative -1\nbig 18446744073709551616\nspaces  30  \n\njunk\nkey 1 2\nlast 40"))
	want := map[string]uint64{"anon": 10, "spaces": 30, "last": 40}
	if len(m) != len(want) {
		t.Fatalf("%v, want %v", m, want)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %d, want %d", k, m[k], v)
		}
	}
}

// FuzzParseFlatKeyed: any bytes parse without panic, and every key kept is
// one of the input's lines with its value.
func FuzzParseFlatKeyed(f *testing.F) {
	f.Add([]byte("usage_usec 5000000\nuser_usec 1\nsystem_usec 2\n"))
	f.Add([]byte("cache 1\nrss 2\ntotal_inactive_file 3\n"))
	f.Add([]byte("a 1\r\nb\x002\n c  3 \n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m := parseFlatKeyed(b)
		for k, v := range m {
			if k == "" || strings.ContainsAny(k, " \n") {
				t.Fatalf("bad key %q", k)
			}
			line := []byte(k + " " + strconv.FormatUint(v, 10))
			found := false
			for l := range bytes.Lines(b) {
				key, val, ok := bytes.Cut(bytes.TrimSpace(l), []byte{' '})
				if ok && string(key) == k {
					if n, err := strconv.ParseUint(string(bytes.TrimSpace(val)), 10, 64); err == nil && n == v {
						found = true
					}
				}
			}
			if !found {
				t.Fatalf("%q not in input", line)
			}
		}
	})
}

// FuzzSandboxPIDFromInfo: the runtime's verbose info is free text to us.
func FuzzSandboxPIDFromInfo(f *testing.F) {
	f.Add(`{"pid":12,"inDocker":true}`, `{"pid":7}`)
	f.Add(`{"pid":1e3}`, `[]`)
	f.Fuzz(func(t *testing.T, info, other string) {
		if pid := sandboxPIDFromInfo(map[string]string{"info": info, "x": other}); pid < 0 {
			t.Fatalf("negative pid %d", pid)
		}
	})
}
