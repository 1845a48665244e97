package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microlet/microlet/internal/testenv"
)

// The hygiene test re-runs this test binary as a child that starts its own
// control plane through Main and Get, then ends in one of these ways.
const (
	envHygieneChild = "MICROLET_CP_HYGIENE_CHILD"
	envHygieneOut   = "MICROLET_CP_HYGIENE_OUT"
)

// childReport is what the child writes before it ends, so the parent knows
// which PIDs and directory to look for.
type childReport struct {
	EtcdPID, APIServerPID int
	Dir                   string
}

// TestHygieneChild is the child's body; it does nothing in a normal run.
func TestHygieneChild(t *testing.T) {
	mode := os.Getenv(envHygieneChild)
	if mode == "" {
		t.Skip("only runs as the child of TestHarnessHygiene")
	}
	cp := Get(t)
	b, err := json.Marshal(childReport{EtcdPID: cp.EtcdPID(), APIServerPID: cp.APIServerPID(), Dir: cp.Dir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(os.Getenv(envHygieneOut), b, 0o600); err != nil {
		t.Fatal(err)
	}
	switch mode {
	case "pass":
	case "fail":
		t.Fatal("failing on purpose")
	case "panic":
		panic("panicking on purpose")
	case "sigkill":
		// No Go code runs after this: only Pdeathsig can clean up.
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
	default:
		t.Fatalf("unknown mode %q", mode)
	}
}

// TestHarnessHygiene proves that a test binary leaves no etcd or
// kube-apiserver behind, whether its tests pass, fail, panic, or the binary
// is SIGKILLed.
func TestHarnessHygiene(t *testing.T) {
	Get(t) // same skip/fail rules as every other test here
	for _, tc := range []struct {
		mode   string
		wantOK bool
	}{
		{"pass", true},
		{"fail", false},
		{"panic", false},
		{"sigkill", false},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "report.json")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHygieneChild$", "-test.v")
			cmd.Env = append(os.Environ(), envHygieneChild+"="+tc.mode, envHygieneOut+"="+out)
			var log bytes.Buffer
			cmd.Stdout, cmd.Stderr = &log, &log
			err := cmd.Run()
			var exit *exec.ExitError
			if tc.wantOK && err != nil || !tc.wantOK && !errors.As(err, &exit) {
				t.Fatalf("child (%s) ended with %v; output:\n%s", tc.mode, err, log.String())
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("child wrote no report (%v); output:\n%s", err, log.String())
			}
			var rep childReport
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			if rep.EtcdPID == 0 || rep.APIServerPID == 0 || rep.Dir == "" {
				t.Fatalf("incomplete report %+v", rep)
			}
			// A panicked or killed child cannot remove its directory;
			// the next Start's sweep would, this test does it now.
			t.Cleanup(func() { _ = os.RemoveAll(rep.Dir) })

			// The kernel delivers Pdeathsig at once, but reaping by init
			// can lag on a loaded machine: poll, generously.
			testenv.Eventually(t, fmt.Sprintf("child (%s) processes gone", tc.mode), 60*time.Second, func() error {
				left := processesUsing(rep.Dir)
				for _, pid := range []int{rep.EtcdPID, rep.APIServerPID} {
					if alive(pid, rep.Dir) && !contains(left, pid) {
						left = append(left, pid)
					}
				}
				if len(left) > 0 {
					return fmt.Errorf("left processes %v running (dir %s)", left, rep.Dir)
				}
				return nil
			})
			if tc.mode == "pass" || tc.mode == "fail" {
				if _, err := os.Stat(rep.Dir); !os.IsNotExist(err) {
					t.Errorf("Main did not remove %s: %v", rep.Dir, err)
				}
			}
		})
	}
}

// alive reports whether pid is a live (not zombie) process whose command
// line mentions dir, so a recycled PID is not mistaken for a leak.
func alive(pid int, dir string) bool {
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	// dir+"/": every flag names a path inside dir, and /tmp/mlcp-12 must
	// not match another package's /tmp/mlcp-123.
	if err != nil || !bytes.Contains(cmdline, []byte(dir+"/")) {
		return false
	}
	return !zombie(pid)
}

func zombie(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// Fields after the parenthesised command name: state is the first.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// processesUsing scans /proc for live processes whose command line
// mentions dir: etcd and kube-apiserver both name it in their flags.
func processesUsing(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if alive(pid, dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
