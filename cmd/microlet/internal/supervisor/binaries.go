package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

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
