package faults

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/testenv/node"
)

// The Docker labels runtime-shim gives the containers it creates
// (services/runtime-shim/internal/docker/labels.go, internal to the shim).
const (
	labelInstance = "io.microlet.instance"
	labelType     = "io.microlet.type"
	labelName     = "io.microlet.name"       // a sandbox's pod name
	labelUID      = "io.microlet.uid"        // a sandbox's pod UID
	labelSandbox  = "io.microlet.sandbox-id" // a container's sandbox
	labelPodName  = "io.microlet.pod-name"   // a container's pod name
	labelPodUID   = "io.microlet.pod-uid"    // a container's pod UID
)

// TestRuntimeKilledInRunPodSandbox kills runtime-shim while its Docker
// create of a pod's pause container is in flight, then lets Docker create
// it: a half-made sandbox nobody recorded (killRuntimeMidCreate). podsyncd
// finds it NOTREADY, kills it and runs the next attempt (SandboxChanged, as
// the kubelet's computePodActions does), and its container GC removes the
// old one (the kubelet's evictSandboxes: a not-ready sandbox without
// containers that is not the pod's newest).
func TestRuntimeKilledInRunPodSandbox(t *testing.T) {
	killRuntimeMidCreate(t, func(pod string) func(map[string]string) bool {
		return func(l map[string]string) bool { return l[labelType] == "sandbox" && l[labelName] == pod }
	})
}

// TestRuntimeKilledInCreateContainer is the same with the create of the
// pod's app container: podsyncd finds it created but never started,
// removes it and creates the same attempt again, so the pod's restart
// count stays 0. Were the retry's create to reach Docker before the held
// one, one of the two would meet Docker's name conflict; runtime-shim
// answers a retried create with the container its name already finds.
func TestRuntimeKilledInCreateContainer(t *testing.T) {
	killRuntimeMidCreate(t, func(pod string) func(map[string]string) bool {
		return func(l map[string]string) bool { return l[labelType] == "container" && l[labelPodName] == pod }
	})
}

// killRuntimeMidCreate runs a node whose runtime-shim reaches Docker
// through a dockerProxy, holds the pod's first Docker container create that
// match(pod name) selects, SIGKILLs runtime-shim while it waits for that
// create, and only then lets the create through: Docker makes a container
// the dead shim never answered for. The supervisor starts runtime-shim
// again and podsyncd retries. Then the pod runs with exactly one sandbox
// and one container in Docker (the orphan adopted or removed), only
// runtime-shim restarted, and once the pod is deleted nothing of it is
// left: no Docker container, no file or directory under the node's
// directory or pod cgroup naming the pod or any of its containers, no
// network namespace.
func killRuntimeMidCreate(t *testing.T, match func(pod string) func(map[string]string) bool) {
	px := startDockerProxy(t)
	n := node.Start(t, node.Options{Args: map[string][]string{
		components.RuntimeShim: {"--docker-host=unix://" + px.sock},
		// The test waits for the orphan's collection.
		components.PodSyncd: {"--container-gc-period=5s"},
	}})
	sup := dialSupervisor(t, n)
	const name = "midcreate"
	held := px.holdCreate(match(name))
	p := n.Create(n.Pod(name, corev1.RestartPolicyAlways, "trap 'exit 0' TERM; while true; do sleep 1; done"))
	uid := string(p.UID)
	select {
	case <-held.arrived:
	case <-time.After(3 * time.Minute):
		t.Fatalf("runtime-shim never asked Docker to create the pod's container\n%s", n.Out.String())
	}
	rs := sup.restarts()
	shim := sup.signal("runtime-shim", syscall.SIGKILL)
	n.Eventually("runtime-shim gone", time.Minute, func() (bool, string) {
		err := syscall.Kill(int(shim.GetPid()), 0)
		return errors.Is(err, syscall.ESRCH), fmt.Sprintf("pid %d: %v", shim.GetPid(), err)
	})
	code, orphan := held.Release()
	if code != http.StatusCreated || orphan == "" {
		t.Fatalf("Docker answered the held create with %d (container %q): want a container created behind the dead shim's back", code, orphan)
	}
	t.Logf("Docker created %s for the killed runtime-shim", orphan)

	p = n.WaitPod(p.Namespace, p.Name, "ready", node.Ready)
	seen := []string{orphan}
	var sandbox, ctr string
	n.Eventually("one sandbox and one container of the pod in Docker", 2*time.Minute, func() (bool, string) {
		sbs := dockerIDs(t, n, labelType+"=sandbox", labelUID+"="+uid)
		cs := dockerIDs(t, n, labelType+"=container", labelPodUID+"="+uid)
		seen = appendNew(appendNew(seen, sbs...), cs...)
		if len(sbs) != 1 || len(cs) != 1 {
			return false, fmt.Sprintf("sandboxes %v, containers %v (orphan %s)", sbs, cs, orphan)
		}
		sandbox, ctr = sbs[0], cs[0]
		return true, ""
	})
	p, err := n.Get(p.Namespace, p.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("container statuses %+v", p.Status.ContainerStatuses)
	}
	cs := p.Status.ContainerStatuses[0]
	if cs.ContainerID != "docker://"+ctr || cs.RestartCount != 0 || !node.Ready(p) {
		t.Errorf("pod's container %s restarts %d ready %v; Docker has only %s: want that one, never restarted, ready",
			cs.ContainerID, cs.RestartCount, node.Ready(p), ctr)
	}
	running, netns := inspectSandbox(t, sandbox)
	if !running || dockerLabel(t, ctr, labelSandbox) != sandbox {
		t.Errorf("sandbox %s running=%v holds container %s of sandbox %s", sandbox, running, ctr, dockerLabel(t, ctr, labelSandbox))
	}
	sup.checkRestarted(rs, "runtime-shim")

	grace := int64(5)
	if err := n.Admin.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	n.WaitGone(p.Namespace, p.Name)
	n.Eventually("nothing of the deleted pod left", 2*time.Minute, func() (bool, string) {
		var left []string
		for _, l := range []string{labelUID, labelPodUID} {
			left = append(left, dockerIDs(t, n, l+"="+uid)...)
		}
		left = append(left, pathsNaming(n, append([]string{uid}, seen...))...)
		if netns != "" {
			if _, err := os.Lstat(netns); err == nil {
				left = append(left, netns)
			}
		}
		return len(left) == 0, fmt.Sprintf("left: %v", left)
	})
}

// dockerIDs are the full IDs of the node's Docker containers with every
// label=value of labels.
func dockerIDs(t *testing.T, n *node.Node, labels ...string) []string {
	t.Helper()
	args := []string{"ps", "-aq", "--no-trunc", "--filter", "label=" + labelInstance + "=" + n.Instance}
	for _, l := range labels {
		args = append(args, "--filter", "label="+l)
	}
	out, err := exec.Command("docker", args...).Output()
	if err != nil {
		t.Fatalf("docker %v: %v", args, err)
	}
	return strings.Fields(string(out))
}

// inspectSandbox says whether the pause container runs and where its
// network namespace is mounted.
func inspectSandbox(t *testing.T, id string) (bool, string) {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Running}} {{.NetworkSettings.SandboxKey}}", id).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", id, err)
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		t.Fatalf("docker inspect %s: %q", id, out)
	}
	netns := ""
	if len(f) > 1 {
		netns = f[1]
	}
	return f[0] == "true", netns
}

func dockerLabel(t *testing.T, id, label string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", fmt.Sprintf("{{index .Config.Labels %q}}", label), id).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", id, err)
	}
	return strings.TrimSpace(string(out))
}

// pathsNaming lists what under the node's directory and its cgroup root
// has one of keys (or, for the systemd cgroup driver, a key with '_' for
// '-') in its name.
func pathsNaming(n *node.Node, keys []string) []string {
	var names []string
	for _, k := range keys {
		names = append(names, k, strings.ReplaceAll(k, "-", "_"))
	}
	roots := []string{n.Dir, filepath.Join("/sys/fs/cgroup", node.CgroupRoot(n.Instance))}
	ctrls, _ := os.ReadDir("/sys/fs/cgroup")
	for _, c := range ctrls {
		roots = append(roots, filepath.Join("/sys/fs/cgroup", c.Name(), node.CgroupRoot(n.Instance)))
	}
	var out []string
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // gone, or not there at all
			}
			if slices.ContainsFunc(names, func(k string) bool { return strings.Contains(d.Name(), k) }) {
				out = append(out, path)
				if d.IsDir() {
					return fs.SkipDir
				}
			}
			return nil
		})
	}
	return out
}

func appendNew(list []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(list, it) {
			list = append(list, it)
		}
	}
	return list
}
