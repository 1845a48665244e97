package components

import (
	"fmt"
	"path/filepath"

	"github.com/microlet/microlet/internal/socket"
)

// Names of the services.
const (
	PodConfig   = "podconfig"
	Statusd     = "statusd"
	CloudSyncd  = "cloudsyncd"
	RuntimeShim = "runtime-shim"
	NodeStatusd = "nodestatusd"
	PodSyncd    = "podsyncd"
	NodeAPI     = "nodeapi"
	// Supervisor is `microlet run` itself; it serves SupervisorService.
	Supervisor = "microlet"
)

// Component describes one service.
type Component struct {
	// Name of the service and of its binary.
	Name string
	// Socket is the socket's file name in the run directory.
	Socket string
	// Needs are the services that must be SERVING before this one starts.
	Needs []string
	// Calls are further services it calls without waiting for them to
	// serve first: a call made while one is (re)starting is retried or
	// waits in the socket's backlog. Its systemd unit wants the sockets of
	// Needs and Calls; the supervisor and compose wait for Needs only.
	Calls []string
}

// All lists the services in a valid start order.
var All = []Component{
	{Name: PodConfig, Socket: "podconfig.sock"},
	{Name: CloudSyncd, Socket: "cloudsyncd.sock"},
	{Name: RuntimeShim, Socket: "runtime.sock"},
	{Name: Statusd, Socket: "statusd.sock", Needs: []string{PodConfig}},
	{Name: NodeStatusd, Socket: "nodestatusd.sock", Needs: []string{RuntimeShim, CloudSyncd}, Calls: []string{NodeAPI, PodSyncd}},
	{Name: NodeAPI, Socket: "nodeapi.sock", Needs: []string{PodConfig, Statusd, RuntimeShim}, Calls: []string{PodSyncd}},
	{Name: PodSyncd, Socket: "podsyncd.sock", Needs: []string{PodConfig, Statusd, RuntimeShim, NodeStatusd}},
}

// SupervisorSocket is the socket of `microlet run` in the run directory.
const SupervisorSocket = "microlet.sock"

// Get returns the named component.
func Get(name string) (Component, error) {
	for _, c := range All {
		if c.Name == name {
			return c, nil
		}
	}
	if name == Supervisor {
		return Component{Name: Supervisor, Socket: SupervisorSocket}, nil
	}
	return Component{}, fmt.Errorf("unknown component %q", name)
}

// SocketPath is where the named component listens inside runDir.
func SocketPath(runDir, name string) string {
	c, err := Get(name)
	if err != nil {
		return filepath.Join(runDir, name+".sock")
	}
	return filepath.Join(runDir, c.Socket)
}

// Endpoint is the unix:// endpoint of the named component inside runDir.
func Endpoint(runDir, name string) string { return socket.Endpoint(SocketPath(runDir, name)) }
