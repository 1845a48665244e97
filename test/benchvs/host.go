package benchvs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// goBuild builds static binaries of pkgs into dir, at the lowest CPU
// priority (the machine may be shared; the build is not measured).
func goBuild(ctx context.Context, repo, dir string, pkgs ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	args := append([]string{"-n", "19", "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", dir + "/"}, pkgs...)
	cmd := exec.CommandContext(ctx, "nice", args...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	return nil
}

// commandOutput is a command's trimmed output, "?" when it fails.
func commandOutput(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

// dockerContainers counts the containers a runtime-shim labelled with
// instance, running or not.
func dockerContainers(instance string) (int, error) {
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=io.microlet.instance="+instance).Output()
	if err != nil {
		return 0, fmt.Errorf("docker ps: %w", err)
	}
	return len(strings.Fields(string(out))), nil
}

// removeImages removes the Docker images matching a label filter.
func removeImages(filter string) {
	out, err := exec.Command("docker", "images", "-q", "--filter", "label="+filter).Output()
	if ids := strings.Fields(string(out)); err == nil && len(ids) > 0 {
		_ = exec.Command("docker", append([]string{"rmi", "-f"}, ids...)...).Run()
	}
}

// createNetwork creates a Docker bridge network and returns its gateway
// address, which Docker puts on the host's bridge interface for it.
func createNetwork(ctx context.Context, name string) (string, error) {
	if out, err := exec.CommandContext(ctx, "docker", "network", "create", "--driver", "bridge", "--label", "io.microlet.benchvs=1", name).CombinedOutput(); err != nil {
		return "", fmt.Errorf("docker network create %s: %v: %s", name, err, out)
	}
	gw := commandOutput("docker", "network", "inspect", "-f", "{{range .IPAM.Config}}{{.Gateway}} {{end}}", name)
	f := strings.Fields(gw)
	if gw == "?" || len(f) == 0 {
		removeNetwork(name)
		return "", fmt.Errorf("docker network %s: no gateway address", name)
	}
	return f[0], nil
}

func removeNetwork(name string) { _ = exec.Command("docker", "network", "rm", name).Run() }
