package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/version"
	"github.com/microlet/microlet/services/nodestatusd/internal/setters"
)

// TestDeclaredFeaturesAtAPIServer: the registered Node's
// status.declaredFeatures at the API server is the computed list, and with
// it the API server's NodeDeclaredFeatureValidator lets a pods/resize of a
// non-sidecar init container through, which it refuses for a pod bound to
// a Node that declares nothing.
func TestDeclaredFeaturesAtAPIServer(t *testing.T) {
	cp := controlplane.Get(t)
	ctx := context.Background()
	const name, bare = "nsd-declared-1", "nsd-declared-bare"
	admin := adminClient(t, cp)
	want := setters.NodeFeatures(version.Kubernetes)
	if !slices.Contains(want, "InPlacePodVerticalScalingInitContainers") {
		t.Fatalf("computed features %q lack the init container resize", want)
	}
	startRig(t, rigOpts{kubeconfig: cp.NodeKubeconfig(name), node: name, noCloud: true})
	eventually(t, "declaredFeatures and allocatable at the API server", func() error {
		n, err := getNode(ctx, admin, name)
		if err != nil {
			return err
		}
		if !slices.Equal(n.Status.DeclaredFeatures, want) {
			return fmt.Errorf("status.declaredFeatures %q, want %q", n.Status.DeclaredFeatures, want)
		}
		// The API server also checks the resize against the Node's
		// allocatable, which the first status update fills in.
		if n.Status.Allocatable.Cpu().IsZero() {
			return fmt.Errorf("no allocatable cpu yet")
		}
		return nil
	})

	// A Node nobody maintains, declaring no features.
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: bare}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), bare, metav1.DeleteOptions{}) })

	if err := resizeInitContainer(ctx, t, admin, bare); err == nil || !strings.Contains(err.Error(), "InPlacePodVerticalScalingInitContainers") {
		t.Fatalf("init container resize on a Node declaring nothing: %v, want a refusal naming InPlacePodVerticalScalingInitContainers", err)
	}
	if err := resizeInitContainer(ctx, t, admin, name); err != nil {
		t.Fatalf("init container resize on %s: %v", name, err)
	}
}

// resizeInitContainer creates a pod bound to node whose non-sidecar init
// container requests 100m CPU and patches pods/resize to 200m.
func resizeInitContainer(ctx context.Context, t *testing.T, c kubernetes.Interface, node string) error {
	t.Helper()
	cpu := func(q string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "declared-" + node, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeName:       node,
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox:1", Resources: cpu("100m")}},
			Containers:     []corev1.Container{{Name: "main", Image: "busybox:1", Resources: cpu("100m")}},
		},
	}
	pods := c.CoreV1().Pods(metav1.NamespaceDefault)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	patch := []byte(`{"spec":{"initContainers":[{"name":"init","resources":{"requests":{"cpu":"200m"}}}]}}`)
	_, err := pods.Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "resize")
	return err
}
