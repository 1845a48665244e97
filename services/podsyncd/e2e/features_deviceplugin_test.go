package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/testenv/node"
	"github.com/microlet/microlet/services/podsyncd/internal/devicemanager/devicetest"
)

// TestDevicePluginResourcesOnNode: a device plugin registers with the real
// podsyncd over its registration socket, and the real nodestatusd puts
// its devices into the Node at the API server: capacity counts every
// device, allocatable the healthy ones; when the plugin goes away
// allocatable drops to 0 and capacity stays, as on the kubelet.
func TestDevicePluginResourcesOnNode(t *testing.T) {
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	n := node.Start(t, node.Options{Args: map[string][]string{
		components.PodSyncd:    {"--device-plugins-dir=" + dir},
		components.NodeStatusd: {"--node-status-update-frequency=2s"},
	}})
	n.WaitReady()

	const res = "example.com/dongle"
	p := devicetest.Start(t, dir, "dongle.sock")
	n.Eventually("podsyncd serving the registration socket", time.Minute, func() (bool, string) {
		err := devicetest.Register(dir, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "dongle.sock", ResourceName: res})
		return err == nil, fmt.Sprint(err)
	})
	p.Updates <- devicetest.Devices(pluginapi.Healthy, pluginapi.Healthy, pluginapi.Unhealthy)
	waitDevices := func(capacity, allocatable string) {
		t.Helper()
		n.Eventually(fmt.Sprintf("%s capacity %s allocatable %s on the Node", res, capacity, allocatable), 2*time.Minute, func() (bool, string) {
			got, err := n.Admin.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			c, a := got.Status.Capacity[corev1.ResourceName(res)], got.Status.Allocatable[corev1.ResourceName(res)]
			return c.String() == capacity && a.String() == allocatable, fmt.Sprintf("capacity %s allocatable %s", c.String(), a.String())
		})
	}
	waitDevices("3", "2")

	p.Stop()
	_ = os.Remove(p.Path)
	waitDevices("3", "0")
	if lists := p.Lists.Load(); lists != 1 {
		t.Errorf("ListAndWatch called %d times, want 1 (no retry after the stream ended)", lists)
	}
}
