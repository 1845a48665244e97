package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// MultiCallBinary is the executable that runs any service
// (cmd/microlet-services): when the supervisor finds it, every service it
// starts runs from it, as separate processes sharing one copy of the code.
const MultiCallBinary = "microlet-services"

// FindMultiCall locates MultiCallBinary: in binDir when given, else beside
// the running microlet executable; "" when it is not there. It is not
// looked up on $PATH: an older install there must not stand in for the
// service binaries built beside microlet.
func FindMultiCall(binDir string) string {
	dir := binDir
	if dir == "" {
		self, err := os.Executable()
		if err != nil {
			return ""
		}
		dir = filepath.Dir(self)
	}
	if p := filepath.Join(dir, MultiCallBinary); isExecutable(p) {
		return p
	}
	return ""
}

// FindBinary locates the named service's executable: in binDir when given,
// else beside the running microlet executable, else on $PATH. The error names
// every place that was searched.
func FindBinary(name, binDir string) (string, error) {
	var tried []string
	try := func(dir string) (string, bool) {
		if dir == "" {
			return "", false
		}
		p := filepath.Join(dir, name)
		tried = append(tried, p)
		if isExecutable(p) {
			return p, true
		}
		return "", false
	}
	if p, ok := try(binDir); ok {
		return p, nil
	}
	if self, err := os.Executable(); err == nil {
		if p, ok := try(filepath.Dir(self)); ok {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err == nil {
		if abs, aerr := filepath.Abs(p); aerr == nil {
			p = abs
		}
		return p, nil
	}
	tried = append(tried, "$PATH")
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("service binary %q not found (looked in %v); build it with `make build` or set --bin-dir", name, tried)
	}
	return "", fmt.Errorf("service binary %q: %w", name, err)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
