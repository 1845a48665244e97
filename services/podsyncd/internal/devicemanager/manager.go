package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// DefaultDir is the directory the kubelet serves device plugins in.
const DefaultDir = pluginapi.DevicePluginPath

// RegistrationSocket is the name of the Registration socket in the directory.
const RegistrationSocket = "kubelet.sock"

// Resource is what the node advertises for one extended resource.
type Resource struct {
	// Capacity counts every device the plugin listed.
	Capacity int64
	// Allocatable counts the healthy ones (0 once the plugin's stream ended).
	Allocatable int64
}

// Manager serves the Registration service and follows the registered
// plugins. Create it with New.
type Manager struct {
	dir string
	log *slog.Logger

	mu        sync.Mutex
	resources map[string]*resourceState
	changed   chan struct{}
	wg        sync.WaitGroup
	ctx       context.Context

	pluginapi.UnimplementedRegistrationServer
}

type resourceState struct {
	endpoint  string
	options   *pluginapi.DevicePluginOptions
	healthy   map[string]bool // device ID -> healthy
	cancel    context.CancelFunc
	connected bool
}

// New returns a Manager for the device plugins directory dir ("" for
// DefaultDir).
func New(dir string, log *slog.Logger) *Manager {
	if dir == "" {
		dir = DefaultDir
	}
	if log == nil {
		log = slog.Default()
	}
	return &Manager{dir: dir, log: log, resources: map[string]*resourceState{}, changed: make(chan struct{}, 1)}
}

// Dir is the device plugins directory.
func (m *Manager) Dir() string { return m.dir }

// Changed receives a value (coalesced) whenever a resource's devices change.
func (m *Manager) Changed() <-chan struct{} { return m.changed }

// Start creates the directory, listens on its kubelet.sock (removing a stale
// one) and serves Registration until ctx ends; it returns once serving.
func (m *Manager) Start(ctx context.Context) error {
	if err := os.MkdirAll(m.dir, 0o750); err != nil {
		return fmt.Errorf("device plugins directory %s: %w", m.dir, err)
	}
	path := filepath.Join(m.dir, RegistrationSocket)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale %s: %w", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("device plugin registration socket: %w", err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, m)
	m.mu.Lock()
	m.ctx = ctx
	m.mu.Unlock()
	m.wg.Go(func() {
		if err := srv.Serve(lis); err != nil {
			m.log.Error("device plugin registration server stopped", "err", err)
		}
	})
	m.wg.Go(func() {
		<-ctx.Done()
		srv.Stop()
	})
	return nil
}

// Wait returns once the server and every plugin stream have stopped
// (after Start's context ended).
func (m *Manager) Wait() { m.wg.Wait() }

// IsExtendedResourceName returns an error naming the problem unless name is
// an extended resource a
// device plugin may advertise: a qualified name outside the kubernetes.io
// namespace (no "kubernetes.io/" in it) that is not a requests. quota name (the rule of the kubelet's
// v1helper.IsExtendedResourceName).
func IsExtendedResourceName(name string) error {
	if !strings.Contains(name, "/") {
		return fmt.Errorf("resource name %q has no domain prefix (an extended resource looks like example.com/device)", name)
	}
	if strings.Contains(name, corev1.ResourceDefaultNamespacePrefix) {
		return fmt.Errorf("resource name %q is in the kubernetes.io namespace, which is reserved for native resources", name)
	}
	if strings.HasPrefix(name, corev1.DefaultResourceRequestsPrefix) {
		return fmt.Errorf("resource name %q has the %q prefix reserved for quota", name, corev1.DefaultResourceRequestsPrefix)
	}
	if errs := validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix + name); len(errs) > 0 {
		return fmt.Errorf("resource name %q is not a qualified name: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// Register is the Registration service: it checks the request and starts
// following the plugin, replacing an earlier registration of the resource.
func (m *Manager) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if r.GetVersion() != pluginapi.Version {
		return nil, fmt.Errorf("device plugin for %q: unsupported API version %q (supported: %s)", r.GetResourceName(), r.GetVersion(), pluginapi.Version)
	}
	if err := IsExtendedResourceName(r.GetResourceName()); err != nil {
		return nil, fmt.Errorf("device plugin registration refused: %w", err)
	}
	ep := r.GetEndpoint()
	if ep == "" || filepath.Base(ep) != ep {
		return nil, fmt.Errorf("device plugin for %q: endpoint %q must be a socket file name in %s", r.GetResourceName(), ep, m.dir)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx == nil || m.ctx.Err() != nil {
		return nil, errors.New("device plugin manager is not running")
	}
	name := r.GetResourceName()
	old := m.resources[name]
	st := &resourceState{endpoint: ep, options: r.GetOptions(), healthy: map[string]bool{}}
	if old != nil {
		old.cancel()
		// The old devices stay advertised (unhealthy until the new
		// stream lists them), as the kubelet keeps them.
		for id := range old.healthy {
			st.healthy[id] = false
		}
	}
	ctx, cancel := context.WithCancel(m.ctx)
	st.cancel = cancel
	m.resources[name] = st
	m.wg.Go(func() { m.follow(ctx, name, st) })
	m.log.Info("device plugin registered", "resource", name, "endpoint", ep)
	return &pluginapi.Empty{}, nil
}

// follow dials the plugin and applies its ListAndWatch stream until it
// ends; then every device of the resource is unhealthy. It never redials.
func (m *Manager) follow(ctx context.Context, name string, st *resourceState) {
	defer m.streamEnded(name, st)
	path := filepath.Join(m.dir, st.endpoint)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		m.log.Error("device plugin dial", "resource", name, "endpoint", path, "err", err)
		return
	}
	defer func() { _ = conn.Close() }()
	client := pluginapi.NewDevicePluginClient(conn)
	opts, err := client.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		m.log.Error("device plugin options", "resource", name, "endpoint", path, "err", err)
		return
	}
	m.mu.Lock()
	st.options = opts
	m.mu.Unlock()
	stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		m.log.Error("device plugin ListAndWatch", "resource", name, "endpoint", path, "err", err)
		return
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil {
				m.log.Error("device plugin ListAndWatch stream ended; not retrying until the plugin registers again", "resource", name, "err", err)
			}
			return
		}
		devs := map[string]bool{}
		for _, d := range resp.GetDevices() {
			devs[d.GetID()] = d.GetHealth() == pluginapi.Healthy
		}
		m.mu.Lock()
		if m.resources[name] == st {
			st.healthy, st.connected = devs, true
		}
		m.mu.Unlock()
		m.notify()
	}
}

func (m *Manager) streamEnded(name string, st *resourceState) {
	m.mu.Lock()
	if m.resources[name] == st {
		st.connected = false
		for id := range st.healthy {
			st.healthy[id] = false
		}
	}
	m.mu.Unlock()
	m.notify()
}

func (m *Manager) notify() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// Resources returns the capacity and allocatable of every resource a
// plugin registered.
func (m *Manager) Resources() map[string]Resource {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Resource, len(m.resources))
	for name, st := range m.resources {
		var r Resource
		for _, ok := range st.healthy {
			r.Capacity++
			if ok {
				r.Allocatable++
			}
		}
		out[name] = r
	}
	return out
}

// HealthyDevices returns the sorted healthy device IDs of resource name.
func (m *Manager) HealthyDevices(name string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.resources[name]
	if st == nil {
		return nil
	}
	var ids []string
	for id, ok := range st.healthy {
		if ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
