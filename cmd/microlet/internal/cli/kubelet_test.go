package cli

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestKubeletConfigFlagsOverrideFile: the kubelet's flags beat the
// KubeletConfiguration, which beats microlet's own file; the result is the
// supervisor's configuration and the services' arguments.
func TestKubeletConfigFlagsOverrideFile(t *testing.T) {
	dir := t.TempDir()
	kcPath := filepath.Join(dir, "kubelet.yaml")
	own := filepath.Join(dir, "microlet.yaml")
	if err := os.WriteFile(kcPath, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfailCgroupV1: false\nmaxPods: 20\nport: 10260\nstaticPodPath: manifests\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(own, []byte("bin_dir: /opt/microlet\nargs: {podsyncd: [\"--resync-period=5s\"]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", kcPath, "--microlet-config=" + own, "--max-pods=30", "--hostname-override", " Node-A ",
		"--node-ip=10.0.0.5", "--node-labels=a=b", "--kubeconfig", "/k", "--root-dir=/var/lib/ml", "--v=4"}
	if !isKubeletConfig(args) {
		t.Fatal("not recognised as a KubeletConfiguration")
	}
	cfg, kc, unimplemented, err := kubeletConfig(args)
	if err != nil {
		t.Fatal(err)
	}
	if kc.MaxPods != 30 || kc.Port != 10260 || kc.StaticPodPath != filepath.Join(dir, "manifests") {
		t.Errorf("effective maxPods %d port %d staticPodPath %q", kc.MaxPods, kc.Port, kc.StaticPodPath)
	}
	if cfg.NodeName != "node-a" || cfg.Kubeconfig != "/k" || cfg.DataDir != "/var/lib/ml" || cfg.LogLevel != "debug" || cfg.BinDir != "/opt/microlet" || cfg.KubeletPort != 10260 {
		t.Errorf("supervisor config: node %q kubeconfig %q data %q log %q bin %q port %d", cfg.NodeName, cfg.Kubeconfig, cfg.DataDir, cfg.LogLevel, cfg.BinDir, cfg.KubeletPort)
	}
	for svc, want := range map[string][]string{
		"nodestatusd": {"--max-pods=30", "--hostname-override=node-a", "--node-ip=10.0.0.5", "--node-labels=a=b"},
		"podconfig":   {"--manifest-dir=" + filepath.Join(dir, "manifests")},
		"nodeapi":     {"--port=10260"},
	} {
		for _, w := range want {
			if !slices.Contains(cfg.Args[svc], w) {
				t.Errorf("%s args %v lack %q", svc, cfg.Args[svc], w)
			}
		}
	}
	if a := cfg.Args["podsyncd"]; a[len(a)-1] != "--resync-period=5s" {
		t.Errorf("microlet's own args must come last (they win): %v", a)
	}
	if len(unimplemented) != 0 {
		t.Errorf("unimplemented = %v", unimplemented)
	}
}
