package external

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microlet/microlet/internal/testenv"
)

// buildExample builds the example plug-in once per test binary.
func buildExample(t *testing.T) string {
	t.Helper()
	return filepath.Join(testenv.Build(t, nil, "github.com/microlet/microlet/examples/cloudprovider-external"), "cloudprovider-external")
}

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBuilt()
	os.Exit(code)
}

func writeConfig(t *testing.T, path, name, ip string, shutdown bool) {
	t.Helper()
	s := fmt.Sprintf("name: %s\nnodes:\n  node-a:\n    provider_id: %s://z1/node-a\n    instance_type: t1\n    zone: z1\n    region: r1\n    shutdown: %v\n    labels: {example.com/from: %s}\n    addresses:\n    - {type: InternalIP, address: %s}\n", name, name, shutdown, name, ip)
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func startPlugin(t *testing.T, bin, sock, cfg string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "--socket", sock, "--config", cfg)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// eventually polls f until it returns nil, for up to 60*time.Second.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	testenv.Eventually(t, what, 60*time.Second, f)
}

func TestExternalPluginKilledAndReplaced(t *testing.T) {
	bin := buildExample(t)
	dir, err := os.MkdirTemp("/tmp", "csx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "cp.sock")
	cfg1, cfg2 := filepath.Join(dir, "one.yaml"), filepath.Join(dir, "two.yaml")
	writeConfig(t, cfg1, "one", "10.0.0.1", false)
	writeConfig(t, cfg2, "two", "10.0.0.2", true)

	// cloudsyncd's side exists before any plug-in does.
	p, err := New("unix://"+sock, "node-a", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	call := func(ctx context.Context) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		a, err := p.NodeAddresses(ctx)
		if err != nil {
			return "", err
		}
		return a[0].Address, nil
	}
	if _, err := call(ctx); err == nil || !strings.Contains(err.Error(), "Unavailable") {
		t.Fatalf("with no plug-in: %v, want Unavailable", err)
	}

	first := startPlugin(t, bin, sock, cfg1)
	eventually(t, "first plug-in", func() error {
		a, err := call(ctx)
		if err == nil && a != "10.0.0.1" {
			err = fmt.Errorf("got %s", a)
		}
		return err
	})
	md, err := p.InstanceMetadata(ctx)
	if err != nil || md.ProviderID != "one://z1/node-a" || md.InstanceType != "t1" || md.AdditionalLabels["example.com/from"] != "one" {
		t.Fatalf("metadata %+v %v", md, err)
	}
	if down, err := p.InstanceShutdown(ctx); err != nil || down {
		t.Fatalf("shutdown %v %v", down, err)
	}

	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	eventually(t, "dead plug-in noticed", func() error {
		if _, err := call(ctx); err == nil {
			return fmt.Errorf("still answering")
		}
		return nil
	})

	// A different process takes over the (stale) socket.
	startPlugin(t, bin, sock, cfg2)
	eventually(t, "second plug-in", func() error {
		a, err := call(ctx)
		if err == nil && a != "10.0.0.2" {
			err = fmt.Errorf("got %s", a)
		}
		return err
	})
	if down, err := p.InstanceShutdown(ctx); err != nil || !down {
		t.Fatalf("second plug-in says shut down; got %v %v", down, err)
	}
	if md, err := p.InstanceMetadata(ctx); err != nil || md.ProviderID != "two://z1/node-a" {
		t.Fatalf("metadata after swap %+v %v", md, err)
	}
}

func TestExternalBadEndpoint(t *testing.T) {
	if _, err := New("tcp://1.2.3.4:5", "n", slog.Default()); err == nil || !strings.Contains(err.Error(), "external_endpoint") {
		t.Fatalf("got %v, want an error naming external_endpoint", err)
	}
}
