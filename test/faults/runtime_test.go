package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/node"
	supervisorv1 "github.com/microlet/microlet/proto/microlet/supervisor/v1"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

// supervisor lists the node's components by name.
type supervisor struct {
	t   *testing.T
	cli supervisorv1.SupervisorServiceClient
}

func dialSupervisor(t *testing.T, n *node.Node) *supervisor {
	t.Helper()
	cc, err := grpcclient.Dial(filepath.Join(n.RunDir, "microlet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return &supervisor{t: t, cli: supervisorv1.NewSupervisorServiceClient(cc)}
}

func (s *supervisor) components() map[string]*supervisorv1.Component {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := node.Components(ctx, s.cli)
	if err != nil {
		s.t.Fatal(err)
	}
	return m
}

// restarts is every component's restart count.
func (s *supervisor) restarts() map[string]int32 {
	out := map[string]int32{}
	for name, c := range s.components() {
		out[name] = c.GetRestarts()
	}
	return out
}

// signal sends sig to the named component's process, and returns the
// component as it was.
func (s *supervisor) signal(name string, sig syscall.Signal) *supervisorv1.Component {
	s.t.Helper()
	c := s.components()[name]
	if c.GetPid() == 0 {
		s.t.Fatalf("%s has no process: %v", name, c)
	}
	if err := syscall.Kill(int(c.GetPid()), sig); err != nil {
		s.t.Fatal(err)
	}
	return c
}

// checkRestarted fails the test unless only the named components restarted
// since before (once each).
func (s *supervisor) checkRestarted(before map[string]int32, restarted ...string) {
	s.t.Helper()
	for name, r := range s.restarts() {
		want := before[name]
		if slices.Contains(restarted, name) {
			want++
		}
		if r != want {
			s.t.Errorf("%s restarts = %d, want %d", name, r, want)
		}
	}
}

// readyCondition is the Node's Ready condition.
func readyCondition(n *node.Node) (corev1.NodeCondition, error) {
	no, err := n.Admin.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
	if err != nil {
		return corev1.NodeCondition{}, err
	}
	for _, c := range no.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c, nil
		}
	}
	return corev1.NodeCondition{}, fmt.Errorf("node %s has no Ready condition", n.Name)
}

// containerIDs is the pod's container IDs by container name, from the API.
func containerIDs(p *corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, cs := range p.Status.ContainerStatuses {
		out[cs.Name] = cs.ContainerID
	}
	return out
}

// TestRuntimeRestart restarts runtime-shim (SIGTERM; the supervisor starts it
// again; the Docker daemon itself cannot be restarted here) under a running
// pod: the pod is adopted, not recreated (same container ID, restart count
// 0), and no other component restarted.
func TestRuntimeRestart(t *testing.T) {
	n := node.Start(t, node.Options{})
	sup := dialSupervisor(t, n)
	p := n.Create(n.Pod("adopted", corev1.RestartPolicyAlways, "sleep 3600"))
	p = n.WaitPod(p.Namespace, p.Name, "ready", node.Ready)
	before := containerIDs(p)
	rs := sup.restarts()
	shim := sup.signal("runtime-shim", syscall.SIGTERM)
	n.Eventually("runtime-shim restarted and serving", 2*time.Minute, func() (bool, string) {
		c := sup.components()["runtime-shim"]
		return c.GetPid() != shim.GetPid() && c.GetPid() != 0 && c.GetHealth() == supervisorv1.Health_HEALTH_SERVING,
			fmt.Sprintf("runtime-shim %v", c)
	})
	// A pod created after the restart runs: the node works through the new
	// runtime process.
	q := n.Create(n.Pod("after", corev1.RestartPolicyAlways, "sleep 3600"))
	n.WaitPod(q.Namespace, q.Name, "ready", node.Ready)
	p, err := n.Get(p.Namespace, p.Name)
	if err != nil {
		t.Fatal(err)
	}
	if after := containerIDs(p); fmt.Sprint(after) != fmt.Sprint(before) || !node.Ready(p) {
		t.Errorf("pod not adopted: containers %v before, %v after, ready=%v", before, after, node.Ready(p))
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			t.Errorf("container %s restarted %d times across the runtime restart", cs.Name, cs.RestartCount)
		}
	}
	sup.checkRestarted(rs, "runtime-shim")
}

// TestHungRuntime stops runtime-shim with SIGSTOP: its socket still accepts
// connections but nothing answers, so only CRI deadlines notice. The node
// goes NotReady with a message naming the runtime endpoint, comes back Ready
// after SIGCONT, and the supervisor restarted nothing (podsyncd and
// nodestatusd rode it out).
func TestHungRuntime(t *testing.T) {
	n := node.Start(t, node.Options{})
	sup := dialSupervisor(t, n)
	p := n.Create(n.Pod("steady", corev1.RestartPolicyAlways, "sleep 3600"))
	p = n.WaitPod(p.Namespace, p.Name, "ready", node.Ready)
	rs := sup.restarts()
	shim := sup.components()["runtime-shim"]
	endpoint := strings.TrimPrefix(shim.GetEndpoint(), "unix://")
	if shim.GetPid() == 0 || endpoint == "" {
		t.Fatalf("runtime-shim component %v: want a process and an endpoint", shim)
	}
	if err := syscall.Kill(int(shim.GetPid()), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(int(shim.GetPid()), syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	n.Eventually("node NotReady naming the runtime socket", 3*time.Minute, func() (bool, string) {
		c, err := readyCondition(n)
		if err != nil {
			return false, err.Error()
		}
		return c.Status == corev1.ConditionFalse && strings.Contains(c.Message, endpoint),
			fmt.Sprintf("Ready=%s: %s", c.Status, c.Message)
	})
	resume()
	n.WaitReady()
	p, err := n.Get(p.Namespace, p.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			t.Errorf("container %s restarted %d times while the runtime hung", cs.Name, cs.RestartCount)
		}
	}
	sup.checkRestarted(rs)
	if got := sup.components()["runtime-shim"].GetPid(); got != shim.GetPid() {
		t.Errorf("runtime-shim pid %d, was %d: it was restarted", got, shim.GetPid())
	}
}
