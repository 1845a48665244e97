package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
	"github.com/microlet/microlet/services/statusd/internal/cache"
	"github.com/microlet/microlet/services/statusd/internal/mirror"
	"github.com/microlet/microlet/services/statusd/internal/store"
	"github.com/microlet/microlet/services/statusd/internal/syncer"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

// waitTimeout is generous: a loaded 2-core machine runs these tests.
const waitTimeout = 90 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func clientFor(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// env is one test's slice of the shared control plane: a node of its own
// (registered with the node's identity) and a namespace of its own.
type env struct {
	cp    *controlplane.ControlPlane
	node  string
	ns    string
	admin kubernetes.Interface
	nodeC kubernetes.Interface
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cp := controlplane.Get(t)
	ctx := testCtx(t)
	suffix := rand.String(5)
	e := &env{cp: cp, node: "node-" + suffix, ns: "ns-" + suffix}
	e.admin = clientFor(t, cp.AdminConfig())
	e.nodeC = clientFor(t, cp.NodeConfig(e.node))
	if err := cp.EnsureNamespace(ctx, e.ns); err != nil {
		t.Fatal(err)
	}
	if _, err := e.nodeC.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.node}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("node registers itself: %v", err)
	}
	return e
}

// apiPod creates a pod bound to the env's node, as a scheduler would.
func (e *env) apiPod(t *testing.T, name string, policy corev1.RestartPolicy) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: corev1.PodSpec{
			NodeName:      e.node,
			RestartPolicy: policy,
			Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
		},
	}
	got, err := e.admin.CoreV1().Pods(e.ns).Create(testCtx(t), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// rig is statusd's connected machinery assembled in-process with the node's
// identity: store, cache, informer, syncer and (optionally) mirror manager.
type rig struct {
	cache  *cache.Cache
	syncer *syncer.Syncer
	mirror *mirror.Manager // with a podconfig client only
	store  *store.Store
	dir    string
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func (e *env) startRig(t *testing.T, pc podconfigv1.PodConfigServiceClient) *rig {
	t.Helper()
	r := &rig{dir: t.TempDir()}
	st, err := store.Open(filepath.Join(r.dir, "statusd.db"))
	if err != nil {
		t.Fatal(err)
	}
	r.store = st
	var sy *syncer.Syncer
	var m *mirror.Manager
	var ready = make(chan struct{})
	r.cache = cache.New(st, cache.WithOnChange(func(uid string) {
		<-ready
		sy.Enqueue(uid)
		if m != nil {
			m.Poke()
		}
	}))
	factory := informers.NewSharedInformerFactoryWithOptions(e.nodeC, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", e.node).String()
	}))
	inf := factory.Core().V1().Pods().Informer()
	log := testLogger(t)
	sy = syncer.New(e.nodeC, r.cache, inf, syncer.WithReconcilePeriod(2*time.Second), syncer.WithLogger(log))
	r.syncer = sy
	if pc != nil {
		m = mirror.New(e.nodeC, pc, e.node, inf, mirror.WithLogger(log), mirror.WithResyncPeriod(2*time.Second),
			mirror.WithRunning(r.cache.StaticPodRunning))
	}
	r.mirror = m
	close(ready)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	factory.Start(ctx.Done())
	r.wg.Go(func() { sy.Run(ctx) })
	if m != nil {
		r.wg.Go(func() { m.Run(ctx) })
	}
	t.Cleanup(func() {
		cancel()
		r.wg.Wait()
		factory.Shutdown()
		_ = st.Close()
	})
	return r
}

// eventually polls f until it returns nil, for up to waitTimeout.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	testenv.Eventually(t, what, waitTimeout, f)
}

func getPod(t *testing.T, c kubernetes.Interface, ns, name string) (*corev1.Pod, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

func runningStatus(restarts int32, ready bool) *corev1.PodStatus {
	rs := corev1.ConditionFalse
	if ready {
		rs = corev1.ConditionTrue
	}
	return &corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: rs},
			{Type: corev1.ContainersReady, Status: rs},
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "c", Image: "busybox", ImageID: "docker://sha", ContainerID: "docker://c-1",
			Ready: ready, RestartCount: restarts,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
		}},
	}
}

func condStatus(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func restarts(p *corev1.Pod) int32 {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == "c" {
			return c.RestartCount
		}
	}
	return -1
}

func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }

var _ = strings.Contains

// shortTempDir is a temp dir short enough for unix socket paths.
func shortTempDir() (string, error) { return os.MkdirTemp("/tmp", "sd") }

func removeAll(dir string) { _ = os.RemoveAll(dir) }
