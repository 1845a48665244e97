package soak

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv/node"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
)

// violations collects what broke an invariant, by invariant, and how many
// times each invariant was checked.
type violations struct {
	mu     sync.Mutex
	checks map[string]int
	found  map[string][]string
}

func newViolations() *violations {
	return &violations{checks: map[string]int{}, found: map[string][]string{}}
}

// check counts one check of invariant; when ok is false, msg is a violation.
func (v *violations) check(invariant string, ok bool, msg string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.checks[invariant]++
	if !ok {
		v.found[invariant] = append(v.found[invariant], msg)
	}
}

// total is the number of violations.
func (v *violations) total() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, f := range v.found {
		n += len(f)
	}
	return n
}

// Invariants, as the summary names them.
const (
	invHealthy    = "a healthy pod's running container is never restarted"
	invRestarts   = "restart counts never go back"
	invTerminal   = "a terminal pod stays terminal"
	invReached    = "every pod reaches the state its spec asks for"
	invRuntime    = "the API's running containers are the runtime's"
	invAcked      = "every status statusd wrote is the API's"
	invGone       = "every deleted pod is gone from the API"
	invNoLeak     = "nothing is left of a deleted pod"
	invWrites     = "status writes per pod lifecycle stay within the normal"
	invMemory     = "no service's memory grows over the run"
	invInjected   = "every fault was injected"
	invServiceUp  = "every service serves at the end"
	invNodeReady  = "the node is Ready at the end"
	monitorPeriod = 5 * time.Second
)

// podSeen is what the monitor remembers of one pod.
type podSeen struct {
	// readyID and readyRestarts are the main container's when the pod was
	// first seen Ready (healthy kinds only).
	readyID       string
	readyRestarts int32
	restarts      map[string]int32
	terminal      corev1.PodPhase
}

// monitor checks the invariants that must hold at every moment, every
// monitorPeriod until ctx ends.
func monitor(ctx context.Context, n *node.Node, run string, v *violations) {
	seen := map[types.UID]*podSeen{}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		cctx, cancel := apiCtx(ctx)
		list, err := n.Admin.CoreV1().Pods(metav1.NamespaceDefault).List(cctx, metav1.ListOptions{LabelSelector: labelRun + "=" + run})
		cancel()
		if err != nil {
			return // the API server is stopped: nothing to look at
		}
		for i := range list.Items {
			observe(&list.Items[i], seen, v, func(p *corev1.Pod) string { return podEvents(ctx, n, p) })
		}
	}, monitorPeriod)
}

// podEvents is the pod's Warning and Killing events, oldest first, one per
// line ("" when the API server cannot say): why a container was restarted.
func podEvents(ctx context.Context, n *node.Node, p *corev1.Pod) string {
	cctx, cancel := apiCtx(ctx)
	defer cancel()
	list, err := n.Admin.CoreV1().Events(p.Namespace).List(cctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(p.UID)).String(),
	})
	if err != nil {
		return ""
	}
	evs := list.Items
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].LastTimestamp.Before(&evs[j].LastTimestamp) })
	var b strings.Builder
	for _, e := range evs {
		if e.Type != corev1.EventTypeWarning && e.Reason != "Killing" {
			continue
		}
		fmt.Fprintf(&b, "\n    %s %s %s x%d: %s", e.LastTimestamp.UTC().Format("15:04:05"), e.Type, e.Reason, max(e.Count, 1), e.Message)
	}
	return b.String()
}

// observe checks one pod against what was seen of it before; events says
// why a container was replaced (the pod's events), asked only then.
func observe(p *corev1.Pod, seen map[types.UID]*podSeen, v *violations, events func(*corev1.Pod) string) {
	s := seen[p.UID]
	if s == nil {
		s = &podSeen{restarts: map[string]int32{}}
		seen[p.UID] = s
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		before, ok := s.restarts[cs.Name]
		v.check(invRestarts, !ok || cs.RestartCount >= before,
			fmt.Sprintf("pod %s container %s: restart count %d after %d", p.Name, cs.Name, cs.RestartCount, before))
		s.restarts[cs.Name] = max(before, cs.RestartCount)
	}
	terminal := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	if s.terminal != "" {
		v.check(invTerminal, p.Status.Phase == s.terminal,
			fmt.Sprintf("pod %s: phase %s after %s", p.Name, p.Status.Phase, s.terminal))
	} else if terminal {
		s.terminal = p.Status.Phase
	}
	k := kindNamed(p.Labels[labelKind])
	if k == nil || !k.healthy || p.DeletionTimestamp != nil {
		return
	}
	main := mainStatus(p)
	if main == nil {
		return
	}
	if s.readyID == "" {
		if node.Ready(p) {
			s.readyID, s.readyRestarts = main.ContainerID, main.RestartCount
		}
		return
	}
	same := main.ContainerID == s.readyID && main.RestartCount == s.readyRestarts
	if same {
		v.check(invHealthy, true, "")
		return
	}
	v.check(invHealthy, false,
		fmt.Sprintf("pod %s: main container %s (restarts %d) when Ready, now %s (restarts %d): %s%s",
			p.Name, s.readyID, s.readyRestarts, main.ContainerID, main.RestartCount, describe(p), events(p)))
	// Each restart is one violation, not one per look that follows.
	s.readyID, s.readyRestarts = main.ContainerID, main.RestartCount
}

// mainStatus is the status of the pod's container "main".
func mainStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == "main" {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// until polls cond every 2 s until it returns true or limit passes; the
// caller then checks what cond left behind.
func until(ctx context.Context, limit time.Duration, cond func() bool) {
	_ = wait.PollUntilContextTimeout(ctx, 2*time.Second, limit, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
}

// checkReached waits for every live pod to reach the state its spec asks
// for, then checks each, and checks that each Ready pod's containers are
// running in the runtime.
func checkReached(ctx context.Context, n *node.Node, live []tracked, limit time.Duration, v *violations) {
	pods := map[string]*corev1.Pod{}
	get := func() {
		for _, t := range live {
			if p, err := n.Get(metav1.NamespaceDefault, t.name); err == nil {
				pods[t.name] = p
			}
		}
	}
	until(ctx, limit, func() bool {
		get()
		for _, t := range live {
			p := pods[t.name]
			if p == nil {
				return false
			}
			if ok, _ := t.kind.reached(p); !ok {
				return false
			}
		}
		return true
	})
	for _, t := range live {
		p := pods[t.name]
		if p == nil {
			v.check(invReached, false, fmt.Sprintf("pod %s (%s): not found", t.name, t.kind.name))
			continue
		}
		ok, msg := t.kind.reached(p)
		v.check(invReached, ok, fmt.Sprintf("pod %s (%s): %s", t.name, t.kind.name, msg))
		if t.kind.healthy && ok {
			id := mainStatus(p).ContainerID
			running, err := dockerRunning(ctx, id)
			v.check(invRuntime, running, fmt.Sprintf("pod %s: the API's container %s is not running in Docker (%v)", t.name, id, err))
		}
	}
}

// dockerRunning says whether Docker runs the container of a CRI container
// ID ("docker://<id>").
func dockerRunning(ctx context.Context, criID string) (bool, error) {
	_, id, ok := strings.Cut(criID, "://")
	if !ok || id == "" {
		return false, fmt.Errorf("no container ID in %q", criID)
	}
	out, err := exec.CommandContext(ctx, "docker", "inspect", "-f", "{{.State.Running}}", id).Output()
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(out)) == "true", nil
}

// checkGone waits until no pod of the run is left in the API.
func checkGone(ctx context.Context, n *node.Node, run string, limit time.Duration, v *violations) {
	var left []string
	until(ctx, limit, func() bool {
		list, err := n.Admin.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: labelRun + "=" + run})
		if err != nil {
			return false
		}
		left = left[:0]
		for _, p := range list.Items {
			left = append(left, p.Name+" "+describe(&p))
		}
		return len(left) == 0
	})
	v.check(invGone, len(left) == 0, fmt.Sprintf("%d pods still in the API: %s", len(left), strings.Join(left, "; ")))
}

// leftovers lists what is left on the host of the pods with these UIDs:
// Docker containers and sandboxes of the node, pod cgroups, and any file
// or directory under the node's dir whose name holds a pod's UID (volume
// dirs, log dirs, checkpoints).
func leftovers(n *node.Node, uids []types.UID) []string {
	var out []string
	if ps, err := exec.Command("docker", "ps", "-a", "--format", "{{.Names}} {{.Status}}",
		"--filter", "label=io.microlet.instance="+n.Instance).Output(); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(string(ps)), "\n") {
			if l != "" {
				out = append(out, "container "+l)
			}
		}
	} else {
		out = append(out, "docker ps: "+err.Error())
	}
	holds := func(name string) bool {
		for _, u := range uids {
			if strings.Contains(name, string(u)) || strings.Contains(name, strings.ReplaceAll(string(u), "-", "_")) {
				return true
			}
		}
		return false
	}
	roots := []string{n.Dir}
	if ctrls, err := os.ReadDir("/sys/fs/cgroup"); err == nil {
		for _, c := range ctrls {
			roots = append(roots, filepath.Join("/sys/fs/cgroup", c.Name(), node.CgroupRoot(n.Instance)))
		}
	}
	roots = append(roots, filepath.Join("/sys/fs/cgroup", node.CgroupRoot(n.Instance)))
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // gone meanwhile, or not there
			}
			if strings.HasPrefix(path, "/sys/") && !d.IsDir() {
				return nil
			}
			if holds(d.Name()) {
				out = append(out, path)
				if d.IsDir() {
					return filepath.SkipDir
				}
			}
			return nil
		})
	}
	sort.Strings(out)
	return out
}

// checkNoLeak waits until nothing is left of the run's pods.
func checkNoLeak(ctx context.Context, n *node.Node, uids []types.UID, limit time.Duration, v *violations) {
	var left []string
	until(ctx, limit, func() bool {
		left = leftovers(n, uids)
		return len(left) == 0
	})
	v.check(invNoLeak, len(left) == 0, fmt.Sprintf("%d left: %s", len(left), strings.Join(left, "; ")))
}

// checkAcknowledged compares what statusd holds for each live pod with
// the API: once statusd says a version is written (synced_version equals
// version), the API shows that status (phase, and each container's ID,
// restart count and state). It waits up to limit for every live pod's
// status to be written.
func checkAcknowledged(ctx context.Context, n *node.Node, live []tracked, limit time.Duration, v *violations) {
	cc, err := grpcclient.Dial(components.SocketPath(n.RunDir, components.Statusd))
	if err != nil {
		v.check(invAcked, false, "dial statusd: "+err.Error())
		return
	}
	defer func() { _ = cc.Close() }()
	cli := statusdv1.NewStatusServiceClient(cc)
	names := map[string]bool{}
	for _, t := range live {
		names[t.name] = true
	}
	var entries []*statusdv1.PodStatusEntry
	var listErr error
	until(ctx, limit, func() bool {
		cctx, cancel := apiCtx(ctx)
		defer cancel()
		resp, err := cli.ListPodStatuses(cctx, &statusdv1.ListPodStatusesRequest{})
		if listErr = err; err != nil {
			return false
		}
		entries = entries[:0]
		synced := true
		for _, e := range resp.GetEntries() {
			if names[e.GetName()] && e.GetNamespace() == metav1.NamespaceDefault {
				entries = append(entries, e)
				synced = synced && e.GetSyncedVersion() == e.GetVersion()
			}
		}
		return synced
	})
	if listErr != nil {
		v.check(invAcked, false, "list statusd's statuses: "+listErr.Error())
		return
	}
	for _, e := range entries {
		if e.GetSyncedVersion() != e.GetVersion() {
			v.check(invAcked, false, fmt.Sprintf("pod %s: statusd's version %d never written (written: %d)", e.GetName(), e.GetVersion(), e.GetSyncedVersion()))
			continue
		}
		var want corev1.PodStatus
		if err := want.Unmarshal(e.GetStatus()); err != nil {
			v.check(invAcked, false, fmt.Sprintf("pod %s: statusd's status does not decode: %v", e.GetName(), err))
			continue
		}
		p, err := n.Get(metav1.NamespaceDefault, e.GetName())
		if err != nil {
			v.check(invAcked, false, fmt.Sprintf("pod %s: %v", e.GetName(), err))
			continue
		}
		a, b := statusKey(&want), statusKey(&p.Status)
		v.check(invAcked, a == b, fmt.Sprintf("pod %s: statusd wrote %s, the API has %s", e.GetName(), a, b))
	}
}

// statusKey is what must agree between statusd and the API: the phase and
// each container's ID, restart count and state.
func statusKey(s *corev1.PodStatus) string {
	var b strings.Builder
	b.WriteString(string(s.Phase))
	for _, cs := range append(append([]corev1.ContainerStatus{}, s.InitContainerStatuses...), s.ContainerStatuses...) {
		state := "waiting"
		switch {
		case cs.State.Running != nil:
			state = "running"
		case cs.State.Terminated != nil:
			state = fmt.Sprintf("exited(%d)", cs.State.Terminated.ExitCode)
		}
		fmt.Fprintf(&b, " %s=%s/%d/%s", cs.Name, cs.ContainerID, cs.RestartCount, state)
	}
	return b.String()
}
