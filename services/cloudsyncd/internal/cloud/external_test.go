package cloud

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/services/cloudsyncd/internal/provider/external"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBuilt()
	os.Exit(code)
}

// TestExternalCapabilities: LoadBalancer() and Routes() follow what the
// plug-in (the example, built and run here on a real unix socket) lists.
func TestExternalCapabilities(t *testing.T) {
	bin := filepath.Join(testenv.Build(t, nil, "github.com/microlet/microlet/examples/cloudprovider-external"), "cloudprovider-external")
	for _, tc := range []struct {
		name, config string
		lb, routes   bool
	}{
		{"instances only", "nodes: {}\n", false, false},
		{"load balancers", "load_balancer_pool: [203.0.113.7]\nnodes: {}\n", true, false},
		{"everything", "load_balancer_pool: [203.0.113.7]\nroutes: true\nnodes: {}\n", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := testenv.ShortDir(t, "cpc")
			sock, cfg := filepath.Join(dir, "cp.sock"), filepath.Join(dir, "cfg.yaml")
			if err := os.WriteFile(cfg, []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "--socket", sock, "--config", cfg)
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			c, err := New(Config{Provider: external.Name, ExternalEndpoint: "unix://" + sock})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// The plug-in may still be starting: HasCapability waits up to 10 s
			// per question, so ask until the instances answer first.
			inst, ok := c.InstancesV2()
			if !ok {
				t.Fatal("external always serves InstancesV2")
			}
			testenv.Eventually(t, "plug-in answers", time.Minute, func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := inst.InstanceExists(ctx, node("any", ""))
				return err
			})
			if _, ok := c.LoadBalancer(); ok != tc.lb {
				t.Errorf("LoadBalancer() = %v, want %v", ok, tc.lb)
			}
			if _, ok := c.Routes(); ok != tc.routes {
				t.Errorf("Routes() = %v, want %v", ok, tc.routes)
			}
		})
	}
}
