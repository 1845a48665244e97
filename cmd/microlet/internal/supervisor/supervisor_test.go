package supervisor

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/config"
	"github.com/microlet/microlet/internal/service"
)

func TestRestartBackoffDoublesUpToTheCap(t *testing.T) {
	s := &Supervisor{cfg: DefaultConfig()}
	bo := s.newBackoff()
	var got []time.Duration
	for range 9 {
		got = append(got, bo.Step())
	}
	want := []time.Duration{
		500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("delays %v, want %v", got, want)
	}
}

func TestChildArgs(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RunDir = "/tmp/r"
	cfg.DataDir = "/var/lib/m/"
	cfg.NodeName = "n1"
	cfg.RuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	cfg.ManifestDir = "/etc/manifests"
	cfg.Args = map[string][]string{components.CloudSyncd: {"--cloud-provider=static"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range components.All {
		if got, want := cfg.External(c.Name), c.Name == components.RuntimeShim; got != want {
			t.Errorf("External(%s) = %v, want %v", c.Name, got, want)
		}
	}
	// The default endpoint spelled out is still ours, not external.
	cfg.PodConfigEndpoint = "/tmp/r/podconfig.sock"
	if cfg.External(components.PodConfig) {
		t.Errorf("podconfig at its default socket counted as external")
	}

	ns := cfg.ChildArgs(components.NodeStatusd)
	for _, want := range []string{
		"--run-dir=/tmp/r", "--data-dir=/var/lib/m/nodestatusd", "--node-name=n1",
		"--runtime-endpoint=unix:///run/containerd/containerd.sock",
		"--podconfig-endpoint=unix:///tmp/r/podconfig.sock",
	} {
		if !slices.Contains(ns, want) {
			t.Errorf("nodestatusd args %q lack %s", ns, want)
		}
	}
	if slices.ContainsFunc(ns, func(a string) bool {
		return strings.HasPrefix(a, "--manifest-dir") || strings.HasPrefix(a, "--kubeconfig")
	}) {
		t.Errorf("nodestatusd args %q carry podconfig's or an empty kubeconfig flag", ns)
	}
	if pc := cfg.ChildArgs(components.PodConfig); !slices.Contains(pc, "--manifest-dir=/etc/manifests") {
		t.Errorf("podconfig args %q lack the manifest dir", pc)
	}
	if slices.ContainsFunc(cfg.ChildArgs(components.NodeAPI), func(a string) bool { return strings.HasPrefix(a, "--rotate-server-certificates") }) {
		t.Error("nodeapi gets --rotate-server-certificates without rotate_server_certificates")
	}
	cfg.RotateServerCertificates = true
	if !slices.Contains(cfg.ChildArgs(components.NodeAPI), "--rotate-server-certificates") {
		t.Error("rotate_server_certificates is not handed to nodeapi")
	}
	if cfg.CertDir != "/var/lib/m/pki" {
		t.Errorf("cert_dir defaults to %q, want <data_dir>/pki", cfg.CertDir)
	}
	if cs := cfg.ChildArgs(components.CloudSyncd); cs[len(cs)-1] != "--cloud-provider=static" {
		t.Errorf("extra args must come last so they win: %q", cs)
	}
	// Allowed peers reach every service, except one whose own args
	// restrict it further (runtime.sock to the admin group only).
	cfg.SocketAllowedGroups = []string{"microlet-admin", "microlet-view"}
	cfg.Args[components.RuntimeShim] = []string{"--socket-allowed-groups=microlet-admin"}
	if sd := cfg.ChildArgs(components.Statusd); !slices.Contains(sd, "--socket-allowed-groups=microlet-admin,microlet-view") {
		t.Errorf("statusd args %q lack the allowed groups", sd)
	}
	rs := cfg.ChildArgs(components.RuntimeShim)
	if n := len(slices.DeleteFunc(slices.Clone(rs), func(a string) bool { return !strings.HasPrefix(a, "--socket-allowed-groups") })); n != 1 || rs[len(rs)-1] != "--socket-allowed-groups=microlet-admin" {
		t.Errorf("runtime-shim args %q: want only its own --socket-allowed-groups", rs)
	}
}

func TestValidateNamesTheKey(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"stop timeout", func(c *Config) { c.StopTimeout = 0 }, "stop_timeout"},
		{"backoff max below first", func(c *Config) { c.RestartBackoffMax = time.Millisecond }, "restart_backoff_max"},
		{"log level", func(c *Config) { c.LogLevel = "chatty" }, "log_level"},
		{"endpoint scheme", func(c *Config) { c.RuntimeEndpoint = "tcp://1.2.3.4:5" }, "runtime_endpoint"},
		{"manifest url", func(c *Config) { c.ManifestURL = "file:///x" }, "manifest_url"},
		{"args key", func(c *Config) { c.Args = map[string][]string{"kubelet": nil} }, `args: unknown service "kubelet"`},
		{"env key", func(c *Config) { c.Env = map[string][]string{"microlet": nil} }, `env: unknown service "microlet"`},
		{"binaries key", func(c *Config) { c.Binaries = map[string]string{"kubelet": "/bin/true"} }, `binaries: unknown service "kubelet"`},
		{"binaries empty path", func(c *Config) { c.Binaries = map[string]string{"podsyncd": ""} }, `binaries: podsyncd: empty path`},
		{"binaries not executable", func(c *Config) { c.Binaries = map[string]string{"podsyncd": "/nonexistent/podsyncd"} }, `binaries: podsyncd: "/nonexistent/podsyncd" is not an executable file`},
		{"binaries of an external service", func(c *Config) {
			c.RuntimeEndpoint = "unix:///run/containerd/containerd.sock"
			c.Binaries = map[string]string{"runtime-shim": "/bin/true"}
		}, `binaries: runtime-shim: its endpoint is external`},
		{"env entry", func(c *Config) { c.Env = map[string][]string{"podsyncd": {"GOGC"}} }, `env: podsyncd: "GOGC" is not NAME=value`},
		{"long run dir", func(c *Config) { c.RunDir = "/" + strings.Repeat("x", 100) }, "longer than"},
		{"shutdown timeout", func(c *Config) { c.ShutdownTimeout = -time.Second }, "shutdown_timeout"},
		{"bootstrap without kubeconfig", func(c *Config) { c.BootstrapKubeconfig = "/etc/b" }, "bootstrap_kubeconfig needs kubeconfig"},
		{"bootstrap in cluster", func(c *Config) { c.BootstrapKubeconfig, c.Kubeconfig = "/etc/b", "in-cluster" }, "bootstrap_kubeconfig cannot"},
		{"bootstrap timeout", func(c *Config) { c.BootstrapKubeconfig, c.Kubeconfig, c.BootstrapTimeout = "/etc/b", "/k", 0 }, "bootstrap_timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.RunDir = "/tmp/r"
			tc.mod(cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestServiceEnv: every service gets the GC defaults, the supervisor's own
// environment beats them, and env entries beat both.
func TestServiceEnv(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Env = map[string][]string{components.PodSyncd: {"GOMEMLIMIT=1GiB"}}
	lookup := func(env []string, k string) (string, int) {
		v, n := "", 0
		for _, e := range env {
			if val, ok := strings.CutPrefix(e, k+"="); ok {
				v, n = val, n+1
			}
		}
		return v, n
	}
	for _, c := range components.All {
		env := cfg.ServiceEnv(c.Name, []string{"PATH=/bin", "GOGC=200"})
		if v, _ := lookup(env, "PATH"); v != "/bin" {
			t.Errorf("%s: PATH not inherited: %q", c.Name, env)
		}
		// The operator's GOGC wins over the default and is not repeated.
		if v, n := lookup(env, "GOGC"); v != "200" || n != 1 {
			t.Errorf("%s: GOGC = %q (%d times), want the inherited 200 once", c.Name, v, n)
		}
		if v, _ := lookup(cfg.ServiceEnv(c.Name, nil), "GOGC"); v == "" {
			t.Errorf("%s: no GOGC default", c.Name)
		}
	}
	// exec.Cmd keeps the last of repeated variables: env's entry comes last.
	if env := cfg.ServiceEnv(components.PodSyncd, nil); env[len(env)-1] != "GOMEMLIMIT=1GiB" {
		t.Errorf("podsyncd env %q does not end with its env entry", env)
	}
}

func TestFindBinary(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "statusd")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "podconfig"), []byte("not executable"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir())
	if got, err := FindBinary("statusd", dir); err != nil || got != exe {
		t.Errorf("FindBinary(statusd) = %q, %v; want %q", got, err, exe)
	}
	_, err := FindBinary("podconfig", dir)
	if err == nil || !strings.Contains(err.Error(), `service binary "podconfig" not found`) || !strings.Contains(err.Error(), dir) {
		t.Errorf("FindBinary(podconfig) error = %v; want it to name the binary and the places searched", err)
	}
	pathDir := t.TempDir()
	onPath := filepath.Join(pathDir, "podsyncd")
	if err := os.WriteFile(onPath, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", pathDir)
	if got, err := FindBinary("podsyncd", dir); err != nil || got != onPath {
		t.Errorf("FindBinary(podsyncd) = %q, %v; want %q from $PATH", got, err, onPath)
	}
}

// TestMultiCallBinary: with microlet-services in the bin dir every service
// runs from it under its own name as argv[0]; separate_binaries, or no
// microlet-services there, starts each service's own binary.
func TestMultiCallBinary(t *testing.T) {
	dir := t.TempDir()
	write := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range components.All {
		write(c.Name)
	}
	t.Setenv("PATH", t.TempDir())
	newCfg := func() *Config {
		cfg := DefaultConfig()
		cfg.RunDir = t.TempDir()
		cfg.DataDir = t.TempDir()
		cfg.NodeName = "n1"
		cfg.BinDir = dir
		return cfg
	}
	check := func(cfg *Config, binary func(name string) string, argv0 func(name string) string) {
		t.Helper()
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range s.children {
			if c.binary != binary(c.name) || c.argv0 != argv0(c.name) {
				t.Errorf("%s: binary %q argv0 %q, want %q %q", c.name, c.binary, c.argv0, binary(c.name), argv0(c.name))
			}
		}
	}
	own := func(name string) string { return filepath.Join(dir, name) }
	none := func(string) string { return "" }
	name := func(n string) string { return n }

	check(newCfg(), own, none)
	multi := write(MultiCallBinary)
	check(newCfg(), func(string) string { return multi }, name)
	cfg := newCfg()
	cfg.SeparateBinaries = true
	check(cfg, own, none)
	// binaries replaces one service's executable and leaves the others on
	// microlet-services.
	replaced := filepath.Join(t.TempDir(), "my-runtime-shim")
	if err := os.WriteFile(replaced, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg = newCfg()
	cfg.Binaries = map[string]string{components.RuntimeShim: replaced}
	check(cfg, func(n string) string {
		if n == components.RuntimeShim {
			return replaced
		}
		return multi
	}, func(n string) string {
		if n == components.RuntimeShim {
			return ""
		}
		return n
	})
	// Not executable: not a multi-call binary.
	if err := os.Chmod(multi, 0o644); err != nil {
		t.Fatal(err)
	}
	check(newCfg(), own, none)
}

// TestPerServiceLogLevel: a service's own --log-level in args wins over the
// supervisor's log_level, which the other services keep.
func TestPerServiceLogLevel(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RunDir = "/tmp/r"
	cfg.DataDir = "/var/lib/m"
	cfg.NodeName = "n1"
	cfg.LogLevel = "warn"
	cfg.Args = map[string][]string{components.PodSyncd: {"--log-level=debug"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{components.PodSyncd: "debug", components.Statusd: "warn"} {
		c := service.DefaultCommon()
		if err := config.Load(name, &c, cfg.ChildArgs(name)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.LogLevel != want {
			t.Errorf("%s runs at log level %q, want %q", name, c.LogLevel, want)
		}
	}
}
