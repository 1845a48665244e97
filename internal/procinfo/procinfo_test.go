package procinfo

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

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
		got, err := ParseLoadavgTasks([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%q: %d, %v", tc.in, got, err)
		}
	}
}

func FuzzParseLoadavgTasks(f *testing.F) {
	f.Add([]byte("0.50 0.40 0.30 3/412 9876\n"))
	f.Add([]byte("0 0 0 /1 1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ParseLoadavgTasks(b)
		if err == nil && n < 0 {
			t.Fatalf("%q: negative count %d", b, n)
		}
		if err != nil && n != 0 {
			t.Fatalf("%q: count %d with error %v", b, n, err)
		}
	})
}

func TestTaskLimitAndCount(t *testing.T) {
	root := t.TempDir()
	for name, content := range map[string]string{
		"sys/kernel/pid_max":     "4194304\n",
		"sys/kernel/threads-max": "1000\n",
		"loadavg":                "0.00 0.01 0.05 1/123 4567\n",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	if limit, ok := TaskLimit(fs); !ok || limit != 1000 {
		t.Errorf("TaskLimit = %d, %v; want threads-max 1000", limit, ok)
	}
	if n, err := TaskCount(root); err != nil || n != 123 {
		t.Errorf("TaskCount = %d, %v; want 123", n, err)
	}
	empty, _ := procfs.NewFS(t.TempDir())
	if limit, ok := TaskLimit(empty); ok {
		t.Errorf("TaskLimit without sysctls = %d, want none", limit)
	}
}

// TestSelf measures this test process: once it has spun long enough to be
// charged a clock tick it has CPU time, and its resident set holds at
// least the Go runtime.
func TestSelf(t *testing.T) {
	var u Usage
	var err error
	for start, x := time.Now(), 0; u.CPUSeconds == 0 && time.Since(start) < 10*time.Second; {
		for i := range 1 << 20 {
			x ^= i * i
		}
		if u, err = Self(); err != nil {
			t.Fatal(err)
		}
	}
	if u.CPUSeconds <= 0 || u.RSS < 1<<20 || u.PSS == 0 || u.PSS > u.RSS || u.PeakRSS < u.RSS/2 {
		t.Fatalf("Self = %+v", u)
	}
	if _, err := Of(-1); err == nil {
		t.Fatal("Of(-1) succeeded")
	}
}
