package controllers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	fakecloud "k8s.io/cloud-provider/fake"
	"k8s.io/utils/ptr"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

const lbFinalizer = "service.kubernetes.io/load-balancer-cleanup"

// ensured records the Services the fake cloud was asked to balance; the
// fake's own maps are not safe to read while its controller writes them.
type ensured struct {
	mu    sync.Mutex
	names []string
}

func (e *ensured) add(c fakecloud.UpdateBalancerCall) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.names = append(e.names, c.Service.Name)
}

func (e *ensured) has(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Contains(e.names, name)
}

// eventually polls f until it returns nil, for up to 3*time.Minute.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	testenv.Eventually(t, what, 3*time.Minute, f)
}

func lbService(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	_, err := cs.CoreV1().Services("default").Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Services("default").Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

func served(cs kubernetes.Interface, name, ip string) func() error {
	return func() error {
		s, err := cs.CoreV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !slices.Contains(s.Finalizers, lbFinalizer) {
			return fmt.Errorf("finalizers %v", s.Finalizers)
		}
		if in := s.Status.LoadBalancer.Ingress; len(in) != 1 || in[0].IP != ip {
			return fmt.Errorf("ingress %v", in)
		}
		return nil
	}
}

func gone(cs kubernetes.Interface, name string) func() error {
	return func() error {
		s, err := cs.CoreV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there, finalizers %v", s.Finalizers)
	}
}

// fastElection keeps the test short (a clean stop hands over within a retry
// period) while leaving a loaded machine's API server seconds to answer a
// renewal; the defaults are upstream's.
func fastElection(cfg *Config, lease string) {
	cfg.LeaderElection.Name = lease
	cfg.LeaderElection.LeaseDuration = 10 * time.Second
	cfg.LeaderElection.RenewDeadline = 8 * time.Second
	cfg.LeaderElection.RetryPeriod = time.Second
}

type running struct {
	once   sync.Once
	cancel context.CancelFunc
	done   chan error
	reg    *prometheus.Registry
}

func start(t *testing.T, cfg Config, cp *controlplane.ControlPlane, cloud *fakecloud.Cloud) *running {
	t.Helper()
	r := &running{done: make(chan error, 1), reg: prometheus.NewRegistry()}
	m, err := New(cfg, cp.AdminConfig(), cloud, WithRegistry(r.reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- m.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels Run and waits for it; a clean stop must return nil.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(2 * time.Minute):
			t.Error("Run did not return after cancel")
		}
	})
}

func (r *running) leader() float64 {
	mfs, err := r.reg.Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() == "cloudsyncd_leader" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// noNodes: these tests create no Node. ServiceController v0.36.3 writes its
// cached Service state without the cache lock (processServiceCreateOrUpdate)
// while its node sync reads it (allServices), a data race the race detector
// reports whenever a Node event and a Service sync overlap; with no Node the
// node sync never runs. The end-to-end tests cover Nodes with the real binary.

// TestServiceControllerAgainstAPIServer runs upstream's ServiceController
// through the Manager against the real API server and a fake cloud: the
// finalizer comes first, then the balancer and status; deletion removes the
// balancer before the finalizer.
func TestServiceControllerAgainstAPIServer(t *testing.T) {
	cp := controlplane.Get(t)
	cs := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	cloud := newFakeCloud()
	calls := &ensured{}
	cloud.EnsureCallCb = calls.add

	cfg := DefaultConfig()
	cfg.Controllers = []string{Service}
	fastElection(&cfg, "ctl-svc")
	r := start(t, cfg, cp, cloud)

	lbService(t, cs, "ctl-svc-a")
	eventually(t, "LoadBalancer served", served(cs, "ctl-svc-a", "192.0.2.10"))
	if !calls.has("ctl-svc-a") {
		t.Fatal("served without EnsureLoadBalancer")
	}
	if v := r.leader(); v != 1 {
		t.Errorf("cloudsyncd_leader %v, want 1", v)
	}
	if err := cs.CoreV1().Services("default").Delete(context.Background(), "ctl-svc-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Service deleted after the balancer", gone(cs, "ctl-svc-a"))
}

// TestLeaderElectionHandsOver runs two Managers on one Lease: only the holder
// acts, and when it stops cleanly (releasing the Lease) the other takes over
// and serves a new Service.
func TestLeaderElectionHandsOver(t *testing.T) {
	cp := controlplane.Get(t)
	cs := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	cloudA, cloudB := newFakeCloud(), newFakeCloud()
	cloudB.ExternalIP = net.ParseIP("192.0.2.20")
	callsA, callsB := &ensured{}, &ensured{}
	cloudA.EnsureCallCb, cloudB.EnsureCallCb = callsA.add, callsB.add

	cfg := DefaultConfig()
	cfg.Controllers = []string{Service}
	fastElection(&cfg, "ctl-le")
	cfgA, cfgB := cfg, cfg
	cfgA.LeaderElection.Identity, cfgB.LeaderElection.Identity = "replica-a", "replica-b"
	a := start(t, cfgA, cp, cloudA)
	eventually(t, "a leads", func() error {
		l, err := cs.CoordinationV1().Leases("kube-system").Get(context.Background(), "ctl-le", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if h := l.Spec.HolderIdentity; h == nil || *h != "replica-a" {
			return fmt.Errorf("holder %v", h)
		}
		return nil
	})
	b := start(t, cfgB, cp, cloudB)

	lbService(t, cs, "ctl-le-1")
	eventually(t, "served by a", served(cs, "ctl-le-1", "192.0.2.10"))
	if callsB.has("ctl-le-1") || b.leader() != 0 {
		t.Fatalf("the standby acted (leader gauge %v)", b.leader())
	}

	a.stop(t)
	if v := a.leader(); v != 0 {
		t.Errorf("stopped replica's cloudsyncd_leader %v, want 0", v)
	}
	lbService(t, cs, "ctl-le-2")
	eventually(t, "served by b", served(cs, "ctl-le-2", "192.0.2.20"))
	if callsA.has("ctl-le-2") {
		t.Fatal("the stopped replica acted")
	}
	if v := b.leader(); v != 1 {
		t.Errorf("new leader's cloudsyncd_leader %v, want 1", v)
	}
}

// TestLosingTheLeaseStopsAndReports takes the Lease away from a leading
// Manager (another holder writes it, as a replica that saw it expire would):
// the leader cannot renew, stops its controllers and Run returns
// ErrLeadershipLost, for the process to exit.
func TestLosingTheLeaseStopsAndReports(t *testing.T) {
	cp := controlplane.Get(t)
	cs := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	cfg := DefaultConfig()
	cfg.Controllers = []string{Service}
	fastElection(&cfg, "ctl-lost")
	cfg.LeaderElection.Identity = "replica-lost"
	reg := prometheus.NewRegistry()
	m, err := New(cfg, cp.AdminConfig(), newFakeCloud(), WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	r := &running{reg: reg}
	eventually(t, "leading", func() error {
		if r.leader() != 1 {
			return errors.New("not leading yet")
		}
		return nil
	})
	eventually(t, "Lease taken by another holder", func() error {
		l, err := cs.CoordinationV1().Leases("kube-system").Get(context.Background(), "ctl-lost", metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Spec.HolderIdentity = ptr.To("usurper")
		l.Spec.LeaseDurationSeconds = ptr.To(int32(3600))
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		_, err = cs.CoordinationV1().Leases("kube-system").Update(context.Background(), l, metav1.UpdateOptions{})
		return err
	})
	select {
	case err := <-done:
		if !errors.Is(err, ErrLeadershipLost) {
			t.Fatalf("Run: %v, want ErrLeadershipLost", err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("Run did not return after the Lease was lost")
	}
	if v := r.leader(); v != 0 {
		t.Errorf("cloudsyncd_leader %v after losing the Lease, want 0", v)
	}
}
