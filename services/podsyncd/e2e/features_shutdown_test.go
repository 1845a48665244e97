package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/internal/testenv/logind"
)

// TestGracefulNodeShutdown is the kubelet's graceful node shutdown on a
// real node (API server, Docker, a private dbus-daemon; logind is the one
// stand-in, see docs/testing.md). podsyncd raises logind's delay with its
// drop-in and holds a delay lock. A cancellation alone leaves every pod
// running. On PrepareForShutdown(true) the Node turns NotReady ("node is
// shutting down"), the priority-0 pods are stopped first within their
// group's 4 s (not their own 600 s), the system-node-critical pod only
// after them, all end Failed/Terminated with a DisruptionTarget condition,
// the lock is released only once none of their containers runs, and a new
// pod is refused; cancelling then makes the node Ready and admitting again.
func TestGracefulNodeShutdown(t *testing.T) {
	bus := logind.StartBus(t)
	dropIn := filepath.Join(t.TempDir(), "logind.conf.d", "99-kubelet.conf")
	ld := logind.Start(t, bus, dropIn, 5*time.Second) // below the 10 s asked for
	s := startStack(t, "--shutdown-grace-period=10s", "--shutdown-grace-period-critical-pods=6s",
		"--system-bus-address="+bus.Address, "--logind-drop-in="+dropIn)

	lock1 := ld.WaitLock(t, 1, 2*time.Minute)
	if lock1.What != "shutdown" || lock1.Mode != "delay" {
		t.Fatalf("lock %+v, want a delay lock on shutdown", lock1)
	}
	if b, err := os.ReadFile(dropIn); err != nil || !strings.Contains(string(b), "[Login]\nInhibitDelayMaxSec=10\n") {
		t.Fatalf("drop-in %q (%v), want InhibitDelayMaxSec=10 under [Login]", b, err)
	}
	if d := ld.InhibitDelayMax(); d != 10*time.Second {
		t.Fatalf("logind's delay after the reload = %s, want 10s", d)
	}

	long := int64(600)
	mk := func(name, script string, critical bool) *corev1.Pod {
		p := s.Pod(name, corev1.RestartPolicyAlways, script)
		p.Spec.TerminationGracePeriodSeconds = &long
		if critical {
			p.Spec.PriorityClassName = "system-node-critical"
		}
		return p
	}
	const loop = "while true; do sleep 1; done"
	s.Create(mk("sd-quick", "trap 'exit 143' TERM; "+loop, false))
	s.Create(mk("sd-stubborn", "trap '' TERM; "+loop, false))
	s.Create(mk("sd-critical", "trap 'sleep 3; exit 143' TERM; "+loop, true))
	ids := map[string]string{} // pod name -> Docker container ID
	uids := map[string]string{}
	for _, name := range []string{"sd-quick", "sd-stubborn", "sd-critical"} {
		p := s.WaitPod("default", name, "running", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
		})
		ids[name] = strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "docker://")
		uids[name] = string(p.UID)
	}
	if p, _ := s.Get("default", "sd-critical"); p.Spec.Priority == nil || *p.Spec.Priority != 2000001000 {
		t.Fatalf("sd-critical priority %v, want system-node-critical's 2000001000", p.Spec.Priority)
	}

	dc, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	evs := watchContainers(t, dc, ids)

	// A cancellation without a shutdown: a new lock, the old one dropped,
	// nothing stopped.
	ld.PrepareForShutdown(t, false)
	lock2 := ld.WaitLock(t, 2, 2*time.Minute)
	select {
	case <-lock1.Released():
	case <-time.After(2 * time.Minute):
		t.Fatal("the first lock was not released after the second was taken")
	}
	for name := range ids {
		p, err := s.Get("default", name)
		if err != nil {
			t.Fatal(err)
		}
		cs := p.Status.ContainerStatuses
		if p.Status.Phase != corev1.PodRunning || len(cs) != 1 || cs[0].State.Running == nil || cs[0].RestartCount != 0 {
			t.Fatalf("%s after a cancellation: phase %s, containers %+v", name, p.Status.Phase, cs)
		}
	}
	if n := evs.count("kill"); n != 0 {
		t.Fatalf("%d kill events after a cancellation alone, want 0", n)
	}
	s.waitNodeReady(corev1.ConditionTrue, "")

	// The shutdown.
	ld.PrepareForShutdown(t, true)
	s.waitNodeReady(corev1.ConditionFalse, "node is shutting down")
	select {
	case <-lock2.Released():
	case <-time.After(3 * time.Minute):
		t.Fatal("the lock was never released")
	}
	// Released only after every pod stopped: nothing of theirs runs now.
	for name, uid := range uids {
		if n := s.dockerRunning(uid); n != 0 {
			t.Errorf("%s has %d running containers when the lock was released", name, n)
		}
	}
	// Group order: the quick priority-0 pod was gone before the critical
	// one got its SIGTERM.
	quickDied := evs.index(ids["sd-quick"], "die", "")
	critTerm := evs.index(ids["sd-critical"], "kill", "15")
	if quickDied < 0 || critTerm < 0 || quickDied > critTerm {
		t.Errorf("events %v: want sd-quick's die (#%d) before sd-critical's SIGTERM (#%d)", evs.all(), quickDied, critTerm)
	}
	// The group's grace period, not the pod's own 600 s: SIGKILL came at
	// least ~4 s after SIGTERM (and long before 600 s, or we would still be
	// waiting above).
	term, kill := evs.at(ids["sd-stubborn"], "kill", "15"), evs.at(ids["sd-stubborn"], "kill", "9")
	if term.IsZero() || kill.IsZero() || kill.Sub(term) < 3500*time.Millisecond {
		t.Errorf("sd-stubborn SIGTERM at %s, SIGKILL at %s: want SIGKILL after its group's 4 s", term, kill)
	}

	for name := range ids {
		p := s.WaitPod("default", name, "Failed by the shutdown", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Terminated"
		})
		if p.Status.Message != "Pod was terminated in response to imminent node shutdown." {
			t.Errorf("%s message %q", name, p.Status.Message)
		}
		if c := condition(p, corev1.DisruptionTarget); c == nil || c.Status != corev1.ConditionTrue || c.Reason != "TerminationByKubelet" ||
			c.Message != "Pod was terminated in response to imminent node shutdown." {
			t.Errorf("%s DisruptionTarget = %+v", name, c)
		}
	}

	// New pods are refused while the node shuts down.
	late := s.Create(s.Pod("sd-late", corev1.RestartPolicyAlways, loop))
	got := s.WaitPod("default", "sd-late", "rejected", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	// The kubelet prefixes its handler's message, which already says so.
	if got.Status.Reason != "NodeShutdown" || got.Status.Message != "Pod was rejected: Pod was rejected as the node is shutting down." {
		t.Errorf("sd-late reason %q message %q, want NodeShutdown and the kubelet's message", got.Status.Reason, got.Status.Message)
	}
	if msg := warningEvent(s.Node, "sd-late", "NodeShutdown"); msg != "Pod was rejected as the node is shutting down." {
		t.Errorf("sd-late NodeShutdown event message %q", msg)
	}
	if n := s.dockerRunning(string(late.UID)); n != 0 {
		t.Errorf("refused pod has %d running containers", n)
	}

	// Cancelled after all: a new lock, Ready again, pods admitted; the
	// stopped pods stay Failed.
	ld.PrepareForShutdown(t, false)
	ld.WaitLock(t, 3, 2*time.Minute)
	s.waitNodeReady(corev1.ConditionTrue, "")
	s.Create(s.Pod("sd-after", corev1.RestartPolicyAlways, loop))
	s.WaitPod("default", "sd-after", "running", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	for name := range ids {
		if p, err := s.Get("default", name); err != nil || p.Status.Phase != corev1.PodFailed {
			t.Errorf("%s came back after the cancellation: %v %v", name, p.Status.Phase, err)
		}
	}
	for _, name := range []string{"sd-quick", "sd-stubborn", "sd-critical", "sd-late", "sd-after"} {
		s.deletePod(name)
	}
}

// waitNodeReady waits for the Node's Ready condition to have status want
// (and message msg when given).
func (s *stack) waitNodeReady(want corev1.ConditionStatus, msg string) {
	s.t.Helper()
	s.Eventually(fmt.Sprintf("Node Ready %s %q", want, msg), 2*time.Minute, func() (bool, string) {
		n, err := s.admin.CoreV1().Nodes().Get(context.Background(), s.node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ok := c.Status == want && (msg == "" || c.Message == msg && c.Reason == "KubeletNotReady")
				return ok, fmt.Sprintf("Ready %s %s %q", c.Status, c.Reason, c.Message)
			}
		}
		return false, "no Ready condition"
	})
}

// containerEvents are Docker's events of some containers, in order.
type containerEvents struct {
	mu   sync.Mutex
	list []events.Message
}

// watchContainers follows Docker's events of the given containers until
// the test ends.
func watchContainers(t *testing.T, dc *client.Client, ids map[string]string) *containerEvents {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := client.Filters{}
	f.Add("type", "container")
	for _, id := range ids {
		f.Add("container", id)
	}
	res := dc.Events(ctx, client.EventsListOptions{Since: strconv.FormatInt(time.Now().Add(-time.Second).Unix(), 10), Filters: f})
	ce := &containerEvents{}
	go func() {
		for {
			select {
			case m, ok := <-res.Messages:
				if !ok {
					return
				}
				ce.mu.Lock()
				ce.list = append(ce.list, m)
				ce.mu.Unlock()
			case err := <-res.Err:
				if err != nil && ctx.Err() == nil {
					t.Logf("docker events ended: %v", err)
				}
				return
			}
		}
	}()
	return ce
}

func (c *containerEvents) match(i int, id, action, signal string) bool {
	m := c.list[i]
	return m.Actor.ID == id && string(m.Action) == action && (signal == "" || m.Actor.Attributes["signal"] == signal)
}

// index is the position of the first matching event, -1 if none.
func (c *containerEvents) index(id, action, signal string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.list {
		if c.match(i, id, action, signal) {
			return i
		}
	}
	return -1
}

// at is the time of the first matching event, zero if none.
func (c *containerEvents) at(id, action, signal string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.list {
		if c.match(i, id, action, signal) {
			return time.Unix(0, c.list[i].TimeNano)
		}
	}
	return time.Time{}
}

// count counts events with action.
func (c *containerEvents) count(action string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.list {
		if string(m.Action) == action {
			n++
		}
	}
	return n
}

func (c *containerEvents) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.list {
		out = append(out, fmt.Sprintf("%.12s %s %s", m.Actor.ID, m.Action, m.Actor.Attributes["signal"]))
	}
	return out
}
