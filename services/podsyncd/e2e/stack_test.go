package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/node"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

// stack is one node: `microlet run` with every service, connected.
type stack struct {
	*node.Node
	t           testing.TB
	node        string
	runDir      string
	manifestDir string
	logDir      string
	admin       kubernetes.Interface
	image       string
	bins        string // directory of the built binaries
	out         *testenv.LockedBuffer
}

// startStack starts a node; podsyncdArgs are added to podsyncd's flags.
func startStack(t testing.TB, podsyncdArgs ...string) *stack {
	t.Helper()
	return startStackArgs(t, map[string][]string{components.PodSyncd: podsyncdArgs})
}

// startStackArgs starts a node with extra flags per service.
func startStackArgs(t testing.TB, args map[string][]string) *stack {
	t.Helper()
	n := node.Start(t, node.Options{Args: args})
	return &stack{Node: n, t: t, node: n.Name, runDir: n.RunDir, manifestDir: n.ManifestDir, logDir: n.LogDir,
		admin: n.Admin, image: n.Image, bins: n.Bins, out: n.Out}
}

func ready(p *corev1.Pod) bool { return node.Ready(p) }

// runtimeClient dials the stack's CRI socket (the contract, so what it
// says holds for any runtime behind it); done closes the connection and
// ends ctx, which lasts timeout.
func (s *stack) runtimeClient(timeout time.Duration) (ctx context.Context, rt runtimeapi.RuntimeServiceClient, done func()) {
	s.t.Helper()
	cc, err := grpcclient.Dial(components.Endpoint(s.runDir, components.RuntimeShim))
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	return ctx, runtimeapi.NewRuntimeServiceClient(cc), func() { cancel(); _ = cc.Close() }
}

// runtimeStatus is the runtime's CRI Status, asked through the stack's
// socket.
func (s *stack) runtimeStatus() *runtimeapi.StatusResponse {
	s.t.Helper()
	ctx, rt, done := s.runtimeClient(time.Minute)
	defer done()
	st, err := rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		s.t.Fatalf("CRI Status: %v", err)
	}
	return st
}

// dockerRunning counts the running containers of a pod UID, asked through
// the stack's CRI socket.
func (s *stack) dockerRunning(uid string) int {
	s.t.Helper()
	ctx, rt, done := s.runtimeClient(30 * time.Second)
	defer done()
	resp, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid},
	}})
	if err != nil {
		s.t.Fatalf("CRI ListContainers: %v", err)
	}
	return len(resp.Containers)
}

// watchNodeReady fails the test if the Node ever reports NotReady after now.
func (s *stack) watchNodeReady(ctx context.Context) func() {
	// Report on the test that asked, not on whatever subtest s.t is by then.
	parent := s.t
	var mu sync.Mutex
	var flapped string
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			n, err := s.admin.CoreV1().Nodes().Get(ctx, s.node, metav1.GetOptions{})
			if err != nil {
				continue
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
					mu.Lock()
					flapped = fmt.Sprintf("%s: %s %s", time.Now().Format(time.RFC3339), c.Reason, c.Message)
					mu.Unlock()
				}
			}
		}
	}()
	return func() {
		close(stop)
		mu.Lock()
		defer mu.Unlock()
		if flapped != "" {
			parent.Errorf("node went NotReady during the test: %s", flapped)
		}
	}
}

// runningPodUIDs lists the pod UIDs of the runtime's running containers.
func (s *stack) runningPodUIDs() []string {
	s.t.Helper()
	ctx, rt, done := s.runtimeClient(30 * time.Second)
	defer done()
	resp, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if err != nil {
		s.t.Fatalf("CRI ListContainers: %v", err)
	}
	var out []string
	for _, c := range resp.Containers {
		if uid := c.Labels["io.kubernetes.pod.uid"]; uid != "" && !slices.Contains(out, uid) {
			out = append(out, uid)
		}
	}
	return out
}
