package sources

import (
	"context"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/testenv/controlplane"
)

func TestAPISourceWithNodeIdentity(t *testing.T) {
	cp := controlplane.Get(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	nodeClient, err := kubernetes.NewForConfig(cp.NodeConfig("pc-node1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"pc-a", "pc-b"} {
		if err := cp.EnsureNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	mk := func(ns, name, node string) {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			zero := int64(0)
			_ = admin.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		})
	}
	mk("pc-a", "mine-1", "pc-node1")
	mk("pc-b", "other", "pc-node2")

	s, r := newSets(), &reports{}
	a := &API{Client: nodeClient, NodeName: "pc-node1", Report: r, Log: slog.New(slog.DiscardHandler)}
	done := make(chan struct{})
	go func() { _ = a.Run(ctx, s.sink); close(done) }()
	defer func() { cancel(); <-done }()

	s.waitFor(t, "mine-1", hasNames("pc-a/mine-1"), nil)
	mk("pc-b", "mine-2", "pc-node1")
	mk("pc-a", "other-2", "pc-node2")
	s.waitFor(t, "mine-1 and mine-2", hasNames("pc-a/mine-1", "pc-b/mine-2"), nil)

	// An update flows through.
	p, err := admin.CoreV1().Pods("pc-a").Get(ctx, "mine-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels = map[string]string{"changed": "yes"}
	if _, err := admin.CoreV1().Pods("pc-a").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "label change", func(ps []*corev1.Pod) bool {
		for _, p := range ps {
			if p.Name == "mine-1" && p.Labels["changed"] == "yes" {
				return true
			}
		}
		return false
	}, nil)

	// A graceful delete shows as a deletion timestamp, then the pod leaves.
	if err := admin.CoreV1().Pods("pc-b").Delete(ctx, "mine-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "mine-2 terminating", func(ps []*corev1.Pod) bool {
		for _, p := range ps {
			if p.Name == "mine-2" {
				return p.DeletionTimestamp != nil
			}
		}
		return false
	}, nil)
	zero := int64(0)
	if err := admin.CoreV1().Pods("pc-b").Delete(ctx, "mine-2", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "mine-1 only", hasNames("pc-a/mine-1"), nil)

	// Another node's pods never appeared in any set.
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, set := range s.all {
		for _, p := range set {
			if p.Spec.NodeName != "pc-node1" {
				t.Fatalf("pod %s/%s of node %s delivered", p.Namespace, p.Name, p.Spec.NodeName)
			}
		}
	}
	if r.find("api") {
		t.Fatalf("errors reported: %v", r.errs)
	}
}
