package devicemanager

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/microlet/microlet/services/podsyncd/internal/devicemanager/devicetest"
)

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
	p := devicetest.Start(t, dir, "sample.sock")
	if err := devicetest.Register(dir, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "sample.sock", ResourceName: res}); err != nil {
		t.Fatal(err)
	}
	p.Updates <- devicetest.Devices(pluginapi.Healthy, pluginapi.Healthy)
	waitFor(t, m, res, Resource{Capacity: 2, Allocatable: 2})
	p.Updates <- devicetest.Devices(pluginapi.Healthy, pluginapi.Unhealthy)
	waitFor(t, m, res, Resource{Capacity: 2, Allocatable: 1})
	if got := m.HealthyDevices(res); len(got) != 1 || got[0] != "a" {
		t.Errorf("healthy devices %v, want [a]", got)
	}

	// The plugin goes away: capacity stays, allocatable goes to 0.
	p.Stop()
	_ = os.Remove(p.Path)
	waitFor(t, m, res, Resource{Capacity: 2, Allocatable: 0})
	if n := p.Lists.Load(); n != 1 {
		t.Errorf("ListAndWatch called %d times before re-registering, want 1", n)
	}

	// Only a new registration brings it back; the manager dialled the
	// first plugin exactly once.
	p2 := devicetest.Start(t, dir, "sample2.sock")
	if err := devicetest.Register(dir, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "sample2.sock", ResourceName: res}); err != nil {
		t.Fatal(err)
	}
	p2.Updates <- devicetest.Devices(pluginapi.Healthy, pluginapi.Healthy, pluginapi.Healthy)
	waitFor(t, m, res, Resource{Capacity: 3, Allocatable: 3})
	if n, n2 := p.Lists.Load(), p2.Lists.Load(); n != 1 || n2 != 1 {
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
		err := devicetest.Register(dir, tc.req)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Register(%v) = %v, want an error with %q", tc.req, err, tc.want)
		}
	}
	if n := len(m.Resources()); n != 0 {
		t.Errorf("%d resources after only bad registrations, want 0", n)
	}
}
