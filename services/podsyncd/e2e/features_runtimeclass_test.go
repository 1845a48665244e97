package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// TestRuntimeClass follows spec.runtimeClassName end to end on the real
// stack: podsyncd resolves it to the RuntimeClass's handler and runs the
// pod's sandbox with it (runtime-shim maps handlers to the Docker daemon's
// runtimes); a handler the runtime does not have leaves the pod Pending
// with a FailedCreatePodSandBox event naming it, as upstream's
// "unconfigured handler" spec expects; and a RuntimeClass that does not
// exist yet (a static pod, which no admission plugin checks) leaves the pod
// waiting with the event until the RuntimeClass is created, then it runs.
func TestRuntimeClass(t *testing.T) {
	s := startStack(t)
	st := s.runtimeStatus()
	var named []string
	for _, h := range st.RuntimeHandlers {
		if h.Name != "" {
			named = append(named, h.Name)
		}
	}
	if len(named) == 0 {
		t.Fatalf("the runtime lists no named handler: %v", st.RuntimeHandlers)
	}
	handler := named[0]
	t.Logf("runtime handlers %q; pods run with %q", named, handler)

	runtimeClass := func(t *testing.T, name, handler string) {
		rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: handler}
		if _, err := s.admin.NodeV1().RuntimeClasses().Create(context.Background(), rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = s.admin.NodeV1().RuntimeClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}

	t.Run("the Node lists the handler", func(t *testing.T) {
		s.t = t
		s.Eventually("Node status.runtimeHandlers", 2*time.Minute, func() (bool, string) {
			n, err := s.admin.CoreV1().Nodes().Get(context.Background(), s.node, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			ok := slices.ContainsFunc(n.Status.RuntimeHandlers, func(h corev1.NodeRuntimeHandler) bool { return h.Name == handler })
			return ok, describeHandlers(n.Status.RuntimeHandlers)
		})
	})

	t.Run("a pod runs with its RuntimeClass's handler", func(t *testing.T) {
		s.t = t
		rcName := "rc-ok-" + s.node
		runtimeClass(t, rcName, handler)
		p := s.Pod("rc-ok", corev1.RestartPolicyAlways, "sleep 3600")
		p.Spec.RuntimeClassName = ptr.To(rcName)
		s.Create(p)
		got := s.WaitPod("default", p.Name, "Running and Ready", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && ready(p) })
		if h := s.sandboxHandler(t, string(got.UID)); h != handler {
			t.Errorf("sandbox runtime handler = %q, want %q", h, handler)
		}
		s.deletePod(p.Name)
	})

	t.Run("an unconfigured handler leaves the pod Pending", func(t *testing.T) {
		s.t = t
		rcName := "rc-unconfigured-" + s.node
		const missing = "no-such-handler"
		runtimeClass(t, rcName, missing)
		p := s.Pod("rc-unconfigured", corev1.RestartPolicyAlways, "sleep 3600")
		p.Spec.RuntimeClassName = ptr.To(rcName)
		s.Create(p)
		s.waitEventContaining(t, "default", p.Name, "FailedCreatePodSandBox", missing)
		got, err := s.Get("default", p.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != corev1.PodPending {
			t.Errorf("phase = %s, want Pending", got.Status.Phase)
		}
		if n := s.dockerRunning(string(got.UID)); n != 0 {
			t.Errorf("%d containers running for a pod whose handler does not exist", n)
		}
		s.deletePod(p.Name)
	})

	t.Run("a missing RuntimeClass waits until it is created", func(t *testing.T) {
		s.t = t
		rcName := "rc-late-" + s.node
		p := s.Pod("rc-static", corev1.RestartPolicyAlways, "sleep 3600")
		p.Spec.NodeName, p.Namespace = "", ""
		p.Spec.RuntimeClassName = ptr.To(rcName)
		p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
		data, err := yaml.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(s.manifestDir, "rc-static.yaml")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(file) })
		name := "rc-static-" + s.node
		s.waitEventContaining(t, "default", name, "FailedCreatePodSandBox", `RuntimeClass "`+rcName+`" not found`)
		runtimeClass(t, rcName, handler)
		// The mirror pod, refused by the RuntimeClass admission plugin
		// until now, appears with the static pod's status.
		mirror := s.WaitPod("default", name, "Running and Ready", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && ready(p) })
		if h := s.sandboxHandler(t, mirror.Annotations["kubernetes.io/config.hash"]); h != handler {
			t.Errorf("sandbox runtime handler = %q, want %q", h, handler)
		}
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		s.WaitGone("default", name)
	})
}

// sandboxHandler is the runtime handler of the ready sandbox of pod uid,
// asked through the stack's CRI socket.
func (s *stack) sandboxHandler(t *testing.T, uid string) string {
	t.Helper()
	ctx, rt, done := s.runtimeClient(30 * time.Second)
	defer done()
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid},
	}})
	if err != nil {
		t.Fatalf("CRI ListPodSandbox: %v", err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("pod %s has %d ready sandboxes, want 1", uid, len(list.Items))
	}
	return list.Items[0].RuntimeHandler
}

// waitEventContaining waits for an event on a pod with reason and a
// message containing part.
func (s *stack) waitEventContaining(t *testing.T, ns, pod, reason, part string) {
	t.Helper()
	s.waitEventWhere(t, ns, pod, reason, "with "+part, func(m string) bool { return strings.Contains(m, part) })
}
