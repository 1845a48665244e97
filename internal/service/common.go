package service

import (
	"time"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/socket"
)

// DefaultRunDir is where sockets live unless --run-dir says otherwise.
const DefaultRunDir = "/run/microlet"

// DefaultDataDir is where services keep state unless --data-dir says otherwise.
const DefaultDataDir = "/var/lib/microlet"

// Common is the configuration every service shares. Embed it inline:
//
//	type Config struct { service.Common `yaml:",inline"` ... }
type Common struct {
	RunDir      string `yaml:"run_dir" flag:"run-dir" usage:"directory of the services' unix sockets"`
	Socket      string `yaml:"socket" flag:"socket" usage:"socket path to listen on (default <run-dir>/<service socket>)"`
	SocketGroup string `yaml:"socket_group" flag:"socket-group" usage:"group that owns the socket (mode 0660); under socket activation the passed socket must already be this group's (SocketGroup= in the .socket unit)"`
	// SocketAllowedUsers and SocketAllowedGroups restrict who may call
	// the service beyond the socket's file mode: each connection's peer
	// credentials (SO_PEERCRED) are checked; calls from others get
	// PermissionDenied. Root and the service's own user are always allowed.
	SocketAllowedUsers  []string      `yaml:"socket_allowed_users" flag:"socket-allowed-users" usage:"users (names or uids) allowed to call the service, checked by peer credentials; root and the service's own user always are (empty with socket_allowed_groups empty: whoever the socket's mode lets connect)"`
	SocketAllowedGroups []string      `yaml:"socket_allowed_groups" flag:"socket-allowed-groups" usage:"groups (names or gids) whose members, by effective or supplementary group, may call the service, checked by peer credentials"`
	DataDir             string        `yaml:"data_dir" flag:"data-dir" usage:"directory for the service's persistent state"`
	NodeName            string        `yaml:"node_name" flag:"node-name" usage:"name of this node (default: the hostname, lower-cased)"`
	Kubeconfig          string        `yaml:"kubeconfig" flag:"kubeconfig" usage:"kubeconfig of the API server; empty runs standalone, \"in-cluster\" uses the pod's service account"`
	MetricsAddr         string        `yaml:"metrics_addr" flag:"metrics-addr" usage:"host:port to serve Prometheus /metrics on (off when empty)"`
	Debug               bool          `yaml:"debug" flag:"debug" usage:"enable gRPC reflection and debug logs, and serve /debug/pprof/ on metrics_addr"`
	LogLevel            string        `yaml:"log_level" flag:"log-level" usage:"log level: debug, info, warn, error"`
	LogFormat           string        `yaml:"log_format" flag:"log-format" usage:"log format: text or json"`
	ShutdownTimeout     time.Duration `yaml:"shutdown_timeout" flag:"shutdown-timeout" usage:"how long to drain calls on stop"`

	PodConfigEndpoint   string `yaml:"podconfig_endpoint" flag:"podconfig-endpoint" usage:"podconfig endpoint (default unix://<run-dir>/podconfig.sock)"`
	StatusdEndpoint     string `yaml:"statusd_endpoint" flag:"statusd-endpoint" usage:"statusd endpoint (default unix://<run-dir>/statusd.sock)"`
	NodeStatusdEndpoint string `yaml:"nodestatusd_endpoint" flag:"nodestatusd-endpoint" usage:"nodestatusd endpoint (default unix://<run-dir>/nodestatusd.sock)"`
	CloudSyncdEndpoint  string `yaml:"cloudsyncd_endpoint" flag:"cloudsyncd-endpoint" usage:"cloudsyncd endpoint (default unix://<run-dir>/cloudsyncd.sock)"`
	NodeAPIEndpoint     string `yaml:"nodeapi_endpoint" flag:"nodeapi-endpoint" usage:"nodeapi endpoint (default unix://<run-dir>/nodeapi.sock)"`
	RuntimeEndpoint     string `yaml:"runtime_endpoint" flag:"runtime-endpoint" usage:"CRI runtime endpoint (default unix://<run-dir>/runtime.sock, runtime-shim)"`
	ImageEndpoint       string `yaml:"image_endpoint" flag:"image-endpoint" usage:"CRI image endpoint (default: the runtime endpoint)"`
}

// DefaultCommon returns the shared defaults.
func DefaultCommon() Common {
	return Common{
		RunDir:          DefaultRunDir,
		DataDir:         DefaultDataDir,
		LogLevel:        "info",
		LogFormat:       "text",
		ShutdownTimeout: 10 * time.Second,
	}
}

// CommonConfig gives the skeleton access to the shared part of a config.
type CommonConfig interface {
	CommonConfig() *Common
}

// CommonConfig returns c itself, so any struct embedding Common satisfies CommonConfig.
func (c *Common) CommonConfig() *Common { return c }

// Endpoint returns the configured endpoint of the named component, or its
// default socket in the run directory.
func (c *Common) Endpoint(name string) string {
	var set string
	switch name {
	case components.PodConfig:
		set = c.PodConfigEndpoint
	case components.Statusd:
		set = c.StatusdEndpoint
	case components.NodeStatusd:
		set = c.NodeStatusdEndpoint
	case components.CloudSyncd:
		set = c.CloudSyncdEndpoint
	case components.RuntimeShim:
		set = c.RuntimeEndpoint
	case components.NodeAPI:
		set = c.NodeAPIEndpoint
	}
	if set != "" {
		if p, err := socket.PathFromEndpoint(set); err == nil {
			return socket.Endpoint(p)
		}
		return set
	}
	return components.Endpoint(c.RunDir, name)
}

// ImageServiceEndpoint is the CRI image endpoint: image_endpoint, else the runtime's.
func (c *Common) ImageServiceEndpoint() string {
	if c.ImageEndpoint != "" {
		return c.ImageEndpoint
	}
	return c.Endpoint(components.RuntimeShim)
}
