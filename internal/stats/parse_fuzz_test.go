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

func TestParseLoadavgTasks(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0.50 0.40 0.30 3/412 9876\n", 412, true},
		{"1.36 3.49 4.53 2/3518 3715089", 3518, true},
		{"1 2 3 4 5", 0, false},
		{"1 2 3 4/x 5", 0, false},
		{"1 2 3 4/-1 5", 0, false},
		{"", 0, false},
	} {
		got, err := parseLoadavgTasks([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%q: %d, %v", tc.in, got, err)
		}
	}
}

func FuzzParseLoadavgTasks(f *testing.F) {
	f.Add([]byte("0.50 0.40 0.30 3/412 9876\n"))
	f.Add([]byte("0 0 0 /1 1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := parseLoadavgTasks(b)
		if err == nil && n < 0 {
			t.Fatalf("%q: negative count %d", b, n)
		}
		if err != nil && n != 0 {
			t.Fatalf("%q: count %d with error %v", b, n, err)
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
