package supervisor

import (
	"fmt"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/kubeclient"
	"github.com/microlet/microlet/internal/nodecreds"
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/internal/socket"
)

// Config is the configuration of `microlet run`. The shared part (run dir,
// data dir, node name, kubeconfig, endpoints, logging) is handed on to every
// service; the rest is the supervisor's own.
type Config struct {
	service.Common `yaml:",inline"`

	// ManifestDir and ManifestURL are podconfig's static pod sources; the
	// supervisor only passes them on.
	ManifestDir string `yaml:"manifest_dir" flag:"manifest-dir" usage:"directory of static pod manifests (handed to podconfig)"`
	ManifestURL string `yaml:"manifest_url" flag:"manifest-url" usage:"URL of a static pod manifest or PodList (handed to podconfig)"`

	// KubeletPort and ClientCAFile are nodeapi's port and client CA; the
	// supervisor only passes them on.
	KubeletPort  int    `yaml:"kubelet_port" flag:"kubelet-port" usage:"port of the kubelet API (handed to nodeapi; 0 picks a free one, which the Node advertises)"`
	ClientCAFile string `yaml:"client_ca_file" flag:"client-ca-file" usage:"CA bundle of the kubelet API's x509 client authentication (handed to nodeapi)"`

	// BootstrapKubeconfig, CertDir and BootstrapTimeout: with a bootstrap
	// kubeconfig the supervisor owns the node's client credential
	// (internal/nodecreds): it requests a certificate when the kubeconfig
	// is missing or expired, writes the kubeconfig, and renews the
	// certificate while it runs.
	BootstrapKubeconfig string        `yaml:"bootstrap_kubeconfig" flag:"bootstrap-kubeconfig" usage:"kubeconfig with a bootstrap credential (a bootstrap token): used to request the node's client certificate when --kubeconfig is missing or expired; --kubeconfig is then written and its certificate renewed"`
	CertDir             string        `yaml:"cert_dir" flag:"cert-dir" usage:"directory of the node's client certificate pairs (default <data-dir>/pki)"`
	BootstrapTimeout    time.Duration `yaml:"bootstrap_timeout" flag:"bootstrap-timeout" usage:"how long to wait for the first client certificate to be approved and signed"`
	// RotateServerCertificates is handed to nodeapi: serve a certificate
	// from the cluster's kubelet-serving signer instead of a self-signed one.
	RotateServerCertificates bool `yaml:"rotate_server_certificates" flag:"rotate-server-certificates" usage:"nodeapi requests its serving certificate from the certificates API (kubernetes.io/kubelet-serving) and renews it (handed to nodeapi)"`

	BinDir string `yaml:"bin_dir" flag:"bin-dir" usage:"directory holding microlet-services or the service binaries (default: beside microlet, then $PATH for the service binaries)"`
	// SeparateBinaries starts each service from its own binary even when
	// microlet-services is found (FindMultiCall).
	SeparateBinaries bool `yaml:"separate_binaries" flag:"separate-binaries" usage:"run each service from its own binary (<bin-dir>/<service>) even when microlet-services is there"`
	// Binaries names the executable of single services, replacing the one
	// found in bin_dir (or microlet-services) for that service alone, e.g.
	//   binaries: {runtime-shim: /opt/shim-v2/runtime-shim}
	// A relative path is taken from the working directory.
	Binaries map[string]string `yaml:"binaries"`

	StopTimeout         time.Duration `yaml:"stop_timeout" flag:"stop-timeout" usage:"how long each service may take to exit after SIGTERM before it is killed"`
	RestartBackoff      time.Duration `yaml:"restart_backoff" flag:"restart-backoff" usage:"first delay before restarting a crashed service; doubles on each crash"`
	RestartBackoffMax   time.Duration `yaml:"restart_backoff_max" flag:"restart-backoff-max" usage:"longest delay between restarts"`
	RestartBackoffReset time.Duration `yaml:"restart_backoff_reset" flag:"restart-backoff-reset" usage:"a service that stayed up this long restarts after the first delay again"`

	// Args are extra command-line arguments per service, appended after the
	// ones the supervisor builds (so they win), e.g.
	//   args: {cloudsyncd: ["--cloud-provider=static"]}
	Args map[string][]string `yaml:"args"`

	// Env are extra environment variables per service ("NAME=value"),
	// after the supervisor's own environment and the Go runtime defaults
	// of ServiceEnv (so they win), e.g.
	//   env: {podsyncd: ["GOMEMLIMIT=300MiB"]}
	Env map[string][]string `yaml:"env"`
}

// DefaultConfig returns the defaults of `microlet run`.
func DefaultConfig() *Config {
	return &Config{
		Common:              service.DefaultCommon(),
		KubeletPort:         10250,
		StopTimeout:         15 * time.Second,
		RestartBackoff:      500 * time.Millisecond,
		RestartBackoffMax:   30 * time.Second,
		RestartBackoffReset: time.Minute,
		BootstrapTimeout:    15 * time.Minute,
	}
}

// Validate completes derived defaults and reports the first bad value, naming
// its key.
func (c *Config) Validate() error {
	if err := c.Complete(components.Supervisor); err != nil {
		return err
	}
	if _, err := service.NewLogger(c.LogLevel, c.LogFormat, os.Stderr); err != nil {
		return err
	}
	if c.RunDir == "" {
		return fmt.Errorf("run_dir must not be empty")
	}
	if c.DataDir == "" {
		return fmt.Errorf("data_dir must not be empty")
	}
	for _, d := range []struct {
		key string
		v   time.Duration
		min time.Duration
	}{
		{"stop_timeout", c.StopTimeout, time.Millisecond},
		{"restart_backoff", c.RestartBackoff, time.Millisecond},
		{"restart_backoff_max", c.RestartBackoffMax, c.RestartBackoff},
		{"restart_backoff_reset", c.RestartBackoffReset, 0},
	} {
		if d.v < d.min {
			return fmt.Errorf("%s must be at least %s, got %s", d.key, d.min, d.v)
		}
	}
	if c.BootstrapKubeconfig != "" {
		switch c.Kubeconfig {
		case "":
			return fmt.Errorf("bootstrap_kubeconfig needs kubeconfig: the file the node's credential is written to")
		case kubeclient.InCluster:
			return fmt.Errorf("bootstrap_kubeconfig cannot be used with kubeconfig %q", kubeclient.InCluster)
		}
		if c.BootstrapTimeout <= 0 {
			return fmt.Errorf("bootstrap_timeout must be positive, got %s", c.BootstrapTimeout)
		}
	}
	if c.CertDir == "" {
		c.CertDir = DataDir(c.DataDir, "pki")
	}
	if c.KubeletPort < 0 || c.KubeletPort > 65535 {
		return fmt.Errorf("kubelet_port %d is out of range 0-65535", c.KubeletPort)
	}
	for _, name := range components.All {
		if err := socket.CheckPath(components.SocketPath(c.RunDir, name.Name)); err != nil {
			return fmt.Errorf("run_dir: %w", err)
		}
	}
	for _, ep := range []struct{ key, v string }{
		{"podconfig_endpoint", c.PodConfigEndpoint},
		{"statusd_endpoint", c.StatusdEndpoint},
		{"nodestatusd_endpoint", c.NodeStatusdEndpoint},
		{"cloudsyncd_endpoint", c.CloudSyncdEndpoint},
		{"runtime_endpoint", c.RuntimeEndpoint},
		{"nodeapi_endpoint", c.NodeAPIEndpoint},
		{"image_endpoint", c.ImageEndpoint},
	} {
		if ep.v == "" {
			continue
		}
		p, err := socket.PathFromEndpoint(ep.v)
		if err != nil {
			return fmt.Errorf("%s: %w", ep.key, err)
		}
		if err := socket.CheckPath(p); err != nil {
			return fmt.Errorf("%s: %w", ep.key, err)
		}
	}
	if c.ManifestURL != "" {
		u, err := url.Parse(c.ManifestURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("manifest_url %q: want an http:// or https:// URL", c.ManifestURL)
		}
	}
	for key, names := range map[string][]string{"args": keys(c.Args), "env": keys(c.Env), "binaries": keys(c.Binaries)} {
		for _, n := range names {
			if _, err := components.Get(n); err != nil || n == components.Supervisor {
				return fmt.Errorf("%s: unknown service %q (want one of %s)", key, n, strings.Join(serviceNames(), ", "))
			}
		}
	}
	for _, n := range keys(c.Binaries) {
		p := c.Binaries[n]
		if p == "" {
			return fmt.Errorf("binaries: %s: empty path", n)
		}
		if c.External(n) {
			return fmt.Errorf("binaries: %s: its endpoint is external (not started by microlet), so a binary for it would never run", n)
		}
		if !isExecutable(p) {
			return fmt.Errorf("binaries: %s: %q is not an executable file", n, p)
		}
	}
	for _, n := range serviceNames() {
		for _, kv := range c.Env[n] {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				return fmt.Errorf("env: %s: %q is not NAME=value", n, kv)
			}
		}
	}
	return nil
}

// serviceGC are the Go runtime settings the supervisor gives each service
// unless its own environment or env says otherwise. GOGC=50 collects once
// the heap grew by half instead of doubling, which an idle service's heap
// (a few MiB live) affords; GOMEMLIMIT is a soft limit about twice what each
// service used with 110 pods (docs/footprint.md), so a burst makes the
// collector work harder before the node feels it, never a hard cap.
var serviceGC = map[string][]string{
	components.PodConfig:   {"GOGC=50", "GOMEMLIMIT=64MiB"},
	components.Statusd:     {"GOGC=50", "GOMEMLIMIT=96MiB"},
	components.NodeStatusd: {"GOGC=50", "GOMEMLIMIT=64MiB"},
	components.CloudSyncd:  {"GOGC=50", "GOMEMLIMIT=64MiB"},
	components.RuntimeShim: {"GOGC=50", "GOMEMLIMIT=256MiB"},
	components.NodeAPI:     {"GOGC=50", "GOMEMLIMIT=96MiB"},
	components.PodSyncd:    {"GOGC=50", "GOMEMLIMIT=128MiB"},
}

// ServiceEnv is the environment of the named service's process: the
// supervisor's own (environ), then serviceGC's defaults for the variables
// environ does not set, then the service's env entries.
func (c *Config) ServiceEnv(name string, environ []string) []string {
	out := slices.Clone(environ)
	for _, kv := range serviceGC[name] {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(environ, func(e string) bool { return strings.HasPrefix(e, k+"=") }) {
			out = append(out, kv)
		}
	}
	return append(out, c.Env[name]...)
}

// External reports whether the named component is served by something the
// supervisor does not start: its endpoint was configured to a socket other
// than the default one in the run directory.
func (c *Config) External(name string) bool {
	return c.Endpoint(name) != components.Endpoint(c.RunDir, name)
}

func serviceNames() []string {
	out := make([]string, len(components.All))
	for i, c := range components.All {
		out[i] = c.Name
	}
	return out
}

// ChildArgs are the command-line arguments of the named service's binary.
func (c *Config) ChildArgs(name string) []string {
	args := []string{
		"--run-dir=" + c.RunDir,
		"--data-dir=" + DataDir(c.DataDir, name),
		"--node-name=" + c.NodeName,
		"--log-level=" + c.LogLevel,
		"--log-format=" + c.LogFormat,
		"--shutdown-timeout=" + c.ShutdownTimeout.String(),
	}
	if c.Kubeconfig != "" {
		args = append(args, "--kubeconfig="+c.Kubeconfig)
	}
	if c.Debug {
		args = append(args, "--debug")
	}
	if c.SocketGroup != "" {
		args = append(args, "--socket-group="+c.SocketGroup)
	}
	// The allowed peers go to every service unless its own args name them:
	// a list flag given twice would add up, and a socket (runtime.sock)
	// restricted more than the others must stay restricted.
	for _, f := range []struct {
		flag string
		v    []string
	}{{"socket-allowed-users", c.SocketAllowedUsers}, {"socket-allowed-groups", c.SocketAllowedGroups}} {
		if len(f.v) > 0 && !hasFlag(c.Args[name], f.flag) {
			args = append(args, "--"+f.flag+"="+strings.Join(f.v, ","))
		}
	}
	args = append(args,
		"--podconfig-endpoint="+c.Endpoint(components.PodConfig),
		"--statusd-endpoint="+c.Endpoint(components.Statusd),
		"--nodestatusd-endpoint="+c.Endpoint(components.NodeStatusd),
		"--cloudsyncd-endpoint="+c.Endpoint(components.CloudSyncd),
		"--runtime-endpoint="+c.Endpoint(components.RuntimeShim),
		"--nodeapi-endpoint="+c.Endpoint(components.NodeAPI),
	)
	if c.ImageEndpoint != "" {
		args = append(args, "--image-endpoint="+c.ImageEndpoint)
	}
	if name == components.PodConfig {
		if c.ManifestDir != "" {
			args = append(args, "--manifest-dir="+c.ManifestDir)
		}
		if c.ManifestURL != "" {
			args = append(args, "--manifest-url="+c.ManifestURL)
		}
	}
	if name == components.NodeAPI {
		args = append(args, "--port="+strconv.Itoa(c.KubeletPort), "--pods-dir="+DataDir(c.DataDir, components.PodSyncd)+"/pods")
		if c.ClientCAFile != "" {
			args = append(args, "--client-ca-file="+c.ClientCAFile)
		}
		if c.RotateServerCertificates {
			args = append(args, "--rotate-server-certificates")
		}
	}
	return append(args, c.Args[name]...)
}

// hasFlag reports whether args set --name (as --name=v or --name v).
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if a == "--"+name || strings.HasPrefix(a, "--"+name+"=") {
			return true
		}
	}
	return false
}

// DataDir is the named service's own state directory under dataDir.
func DataDir(dataDir, name string) string { return strings.TrimRight(dataDir, "/") + "/" + name }

// NodeCredentials is the node credential configuration when the supervisor
// owns it (bootstrap_kubeconfig is set).
func (c *Config) NodeCredentials() (nodecreds.Config, bool) {
	return nodecreds.Config{
		NodeName:            c.NodeName,
		Kubeconfig:          c.Kubeconfig,
		BootstrapKubeconfig: c.BootstrapKubeconfig,
		CertDir:             c.CertDir,
		WaitTimeout:         c.BootstrapTimeout,
	}, c.BootstrapKubeconfig != ""
}

// keys returns m's keys, sorted, so validation reports the same one first
// every time.
func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
