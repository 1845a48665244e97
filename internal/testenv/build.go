package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// builds holds the binaries compiled by this test process, one directory
// per distinct Build call, and the parent directory they all live in.
var builds struct {
	mu   sync.Mutex
	root string
	dirs map[string]*built
}

type built struct {
	once sync.Once
	dir  string
	err  error
}

// Build compiles the Go packages pkgs (full import paths) with `go build`
// plus flags into one temporary directory and returns it; each binary is
// named after its package's last path element. A second call with the same
// flags and packages returns the same directory without building again, so
// every test of a package shares one build; plain build flags reuse the go
// build cache other tests filled. A build failure fails t, and every later
// call with the same arguments, with the compiler's output.
//
// The directories are removed by RemoveBuilt, which TestMain should call
// after m.Run (controlplane.Main does).
func Build(t testing.TB, flags []string, pkgs ...string) string {
	t.Helper()
	key := strings.Join(flags, " ") + "\x00" + strings.Join(pkgs, " ")
	builds.mu.Lock()
	if builds.dirs == nil {
		builds.dirs = map[string]*built{}
	}
	b := builds.dirs[key]
	if b == nil {
		b = &built{}
		builds.dirs[key] = b
	}
	builds.mu.Unlock()

	b.once.Do(func() { b.dir, b.err = build(flags, pkgs) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.dir
}

func build(flags, pkgs []string) (string, error) {
	builds.mu.Lock()
	if builds.root == "" {
		sweepBuilt()
		root, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", builtPrefix, os.Getpid()))
		if err != nil {
			builds.mu.Unlock()
			return "", err
		}
		builds.root = root
	}
	root := builds.root
	builds.mu.Unlock()

	dir, err := os.MkdirTemp(root, "b")
	if err != nil {
		return "", err
	}
	args := append(append([]string{"build"}, flags...), "-o", dir+"/")
	out, err := exec.Command("go", append(args, pkgs...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(append(args, pkgs...), " "), err, out)
	}
	return dir, nil
}

// RemoveBuilt deletes every binary Build made in this process.
func RemoveBuilt() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.root != "" {
		_ = os.RemoveAll(builds.root)
		builds.root = ""
		builds.dirs = nil
	}
}

// builtPrefix names Build's directories in the temp dir, followed by the
// pid of the test process that made them.
const builtPrefix = "microlet-testbin-"

// sweepBuilt removes the build directories of test processes that are gone
// without calling RemoveBuilt: a test that panicked or hit -timeout ends
// the process before TestMain's cleanup runs, and each such run would
// otherwise leave its binaries (tens of MB) in the temp dir.
func sweepBuilt() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), builtPrefix+"*"))
	for _, d := range dirs {
		pid, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(d), builtPrefix), "-")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(pid)
		if err != nil || n == os.Getpid() {
			continue
		}
		// Signal 0 asks whether the process exists; ESRCH says it is gone.
		if err := syscall.Kill(n, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}
