package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFactsAndStatsFromTree(t *testing.T) {
	root := t.TempDir()
	h := &Host{Proc: filepath.Join(root, "proc"), Sys: filepath.Join(root, "sys"), Etc: filepath.Join(root, "etc")}
	write(t, filepath.Join(h.Proc, "meminfo"), "MemTotal:        2048 kB\nMemFree:  100 kB\nMemAvailable:    1024 kB\nHugePages_Total: 0\n")
	write(t, filepath.Join(h.Proc, "sys/kernel/random/boot_id"), "boot-1\n")
	write(t, filepath.Join(h.Proc, "sys/kernel/osrelease"), "6.1.0-test\n")
	write(t, filepath.Join(h.Proc, "sys/kernel/pid_max"), "4194304\n")
	write(t, filepath.Join(h.Proc, "sys/kernel/threads-max"), "1000\n")
	write(t, filepath.Join(h.Proc, "loadavg"), "0.00 0.01 0.05 1/123 4567\n")
	write(t, filepath.Join(h.Etc, "machine-id"), "abc123\n")
	write(t, filepath.Join(h.Etc, "os-release"), "NAME=Test\nPRETTY_NAME=\"Test Linux 1\"\n")
	write(t, filepath.Join(h.Sys, "class/dmi/id/product_uuid"), "ABCD-EF\n")
	write(t, filepath.Join(h.Sys, "kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"), "3\n")

	f, err := h.Facts()
	if err != nil {
		t.Fatal(err)
	}
	want := Facts{MachineID: "abc123", SystemUUID: "abcd-ef", BootID: "boot-1", KernelVersion: "6.1.0-test", OSImage: "Test Linux 1", MemoryBytes: 2048 * 1024}
	if f.MachineID != want.MachineID || f.SystemUUID != want.SystemUUID || f.BootID != want.BootID ||
		f.KernelVersion != want.KernelVersion || f.OSImage != want.OSImage || f.MemoryBytes != want.MemoryBytes {
		t.Fatalf("facts = %+v", f)
	}
	if got := f.HugePages[2<<20]; got != 3*2<<20 {
		t.Fatalf("hugepages = %v", f.HugePages)
	}
	s, err := h.Stats(root, root)
	if err != nil {
		t.Fatal(err)
	}
	if s.MemoryAvailable != 1024*1024 || s.PIDMax != 1000 || s.PIDs != 123 || s.Fs.Capacity == 0 || s.ImageFs != s.Fs {
		t.Fatalf("stats = %+v", s)
	}
}

func TestRealHost(t *testing.T) {
	f, err := New().Facts()
	if err != nil {
		t.Fatal(err)
	}
	if f.MemoryBytes <= 0 || f.KernelVersion == "" || f.BootID == "" {
		t.Fatalf("facts of this machine look empty: %+v", f)
	}
	s, err := New().Stats("/", "")
	if err != nil {
		t.Fatal(err)
	}
	if s.PIDMax <= 0 || s.PIDs <= 0 || s.Fs.Capacity == 0 {
		t.Fatalf("stats of this machine look empty: %+v", s)
	}
}

func TestBadMeminfo(t *testing.T) {
	for name, content := range map[string]string{
		"no MemTotal": "MemFree: 1 kB\n",
		"bad number":  "MemTotal: x kB\n",
		"bad unit":    "MemTotal: 1 MB\n",
	} {
		t.Run(name, func(t *testing.T) {
			h := &Host{Proc: t.TempDir()}
			write(t, filepath.Join(h.Proc, "meminfo"), content)
			if _, err := h.Facts(); err == nil || !strings.Contains(err.Error(), "meminfo") {
				t.Fatalf("Facts with meminfo %q: %v, want a meminfo error", content, err)
			}
			if _, err := h.Stats(h.Proc, ""); err == nil || !strings.Contains(err.Error(), "meminfo") {
				t.Fatalf("Stats with meminfo %q: %v, want a meminfo error", content, err)
			}
		})
	}
}
