package devicemanager

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// samplePlugin is a device plugin served on a real unix socket: it lists
// the devices sent on updates and counts its ListAndWatch calls.
type samplePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	updates chan []*pluginapi.Device
	lists   atomic.Int32
	srv     *grpc.Server
	path    string
}

func (p *samplePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *samplePlugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	p.lists.Add(1)
	for {
		select {
		case <-s.Context().Done():
			return nil
		case devs := <-p.updates:
			if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
				return err
			}
		}
	}
}

func startPlugin(t *testing.T, dir, name string) *samplePlugin {
	t.Helper()
	p := &samplePlugin{updates: make(chan []*pluginapi.Device, 4), path: filepath.Join(dir, name)}
	lis, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatal(err)
	}
	p.srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	go func() { _ = p.srv.Serve(lis) }()
	t.Cleanup(p.srv.Stop)
	return p
}

func register(dir string, req *pluginapi.RegisterRequest) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, RegistrationSocket), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, req)
	return err
}

func devices(health ...string) []*pluginapi.Device {
	var out []*pluginapi.Device
	for i, h := range health {
		out = append(out, &pluginapi.Device{ID: string(rune('a' + i)), Health: h})
	}
	return out
}

// waitFor polls Resources until want holds for resource name (a condition,
// not a timing assertion: the deadline only bounds a failing test).
func waitFor(t *testing.T, m *Manager, name string, want Resource) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, ok := m.Resources()[name]
		if ok && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: got %+v (present %v), want %+v", name, got, ok, want)
		}
		select {
		case <-m.Changed():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestRegisterListAndWatchAndStreamEnd(t *testing.T) {
	dir, err := os.MkdirTemp("", "dpm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	dir = filepath.Join(dir, "device-plugins") // Start creates it
	ctx, cancel := context.WithCancel(context.Background())
	m := New(dir, nil)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); m.Wait() })

	const res = "example.com/resource"
	p := startPlugin(t, dir, "sample.sock")
	if err := register(dir, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "sample.sock", ResourceName: res}); err != nil {
		t.Fatal(err)
	}
	p.updates <- devices(pluginapi.Healthy, pluginapi.Healthy)
	waitFor(t, m, res, Resource{Capacity: 2, Allocatable: 2})
	p.updates <- devices(pluginapi.Healthy, pluginapi.Unhealthy)
	waitFor(t, m, res, Resource{Capacity: 2, Allocatable: 1})
	if got := m.HealthyDevices(res); len(got) != 1 || got[0] != "a" {
		t.Errorf("healthy devices %v, want [a]", got)
	}

	// The plugin goes away: capacity stays, allocatable goes to 0.
	p.srv.Stop()
	_ = os.Remove(p.path)
	waitFor(t, m, res, Resource{Capacity: 2, Allocatable: 0})
	if n := p.lists.Load(); n != 1 {
		t.Errorf("ListAndWatch called %d times before re-registering, want 1", n)
	}

	// Only a new registration brings it back; the manager dialled the
	// first plugin exactly once.
	p2 := startPlugin(t, dir, "sample2.sock")
	if err := register(dir, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "sample2.sock", ResourceName: res}); err != nil {
		t.Fatal(err)
	}
	p2.updates <- devices(pluginapi.Healthy, pluginapi.Healthy, pluginapi.Healthy)
	waitFor(t, m, res, Resource{Capacity: 3, Allocatable: 3})
	if n, n2 := p.lists.Load(), p2.lists.Load(); n != 1 || n2 != 1 {
		t.Errorf("ListAndWatch calls: first plugin %d, second %d; want 1 and 1", n, n2)
	}
}

func TestRegisterRefusesBadRequests(t *testing.T) {
	dir, err := os.MkdirTemp("", "dpm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ctx, cancel := context.WithCancel(context.Background())
	m := New(dir, nil)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); m.Wait() })
	for _, tc := range []struct {
		req  *pluginapi.RegisterRequest
		want string
	}{
		{&pluginapi.RegisterRequest{Version: "v1alpha1", Endpoint: "x.sock", ResourceName: "example.com/r"}, `unsupported API version "v1alpha1"`},
		{&pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "x.sock", ResourceName: "cpu"}, "no domain prefix"},
		{&pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "x.sock", ResourceName: "kubernetes.io/gpu"}, "reserved for native resources"},
		{&pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "x.sock", ResourceName: "requests.example.com/r"}, "reserved for quota"},
		{&pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "x.sock", ResourceName: "example.com/r r"}, "not a qualified name"},
		{&pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "../x.sock", ResourceName: "example.com/r"}, "must be a socket file name"},
	} {
		err := register(dir, tc.req)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Register(%v) = %v, want an error with %q", tc.req, err, tc.want)
		}
	}
	if n := len(m.Resources()); n != 0 {
		t.Errorf("%d resources after only bad registrations, want 0", n)
	}
}
