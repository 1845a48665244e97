package setters

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-helpers/nodedeclaredfeatures"
	"k8s.io/component-helpers/nodedeclaredfeatures/features"

	"github.com/microlet/microlet/internal/version"
)

// TestNodeFeatures: the declared list of the release microlet implements is
// the features whose gates Implemented answers yes for, sorted, and the
// setter puts it into status.declaredFeatures.
func TestNodeFeatures(t *testing.T) {
	want := []string{"ExtendWebSocketsToKubelet", "InPlacePodVerticalScalingInitContainers"}
	if got := NodeFeatures(version.Kubernetes); !slices.Equal(got, want) {
		t.Fatalf("NodeFeatures(%s) = %q, want %q", version.Kubernetes, got, want)
	}
	node := &corev1.Node{Status: corev1.NodeStatus{DeclaredFeatures: []string{"Stale"}}}
	if err := DeclaredFeatures(&Inputs{Version: version.Kubernetes})(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(node.Status.DeclaredFeatures, want) {
		t.Fatalf("status.declaredFeatures = %q, want %q", node.Status.DeclaredFeatures, want)
	}
}

// TestEveryRegisteredGateAnswered: each gate a feature of component-helpers'
// registry needs has a deliberate answer in Implemented, so a feature added
// by a newer library fails here until docs/nodestatusd.md decides it.
func TestEveryRegisteredGateAnswered(t *testing.T) {
	for _, f := range features.AllFeatures {
		for _, g := range f.Requirements().EnabledFeatureGates {
			if _, ok := Implemented[g]; !ok {
				t.Errorf("feature %s needs gate %s, which Implemented does not answer", f.Name(), g)
			}
		}
	}
}

// TestDeclaredFeaturesAdmitInitContainerResize: matched the way the API
// server's NodeDeclaredFeatureValidator matches a pod update against the
// Node, a resize of a non-sidecar init container fits a node declaring
// NodeFeatures and not one declaring nothing, and a pod-level resources
// resize (which podsyncd cannot do) fits neither.
func TestDeclaredFeaturesAdmitInitContainerResize(t *testing.T) {
	fw := nodedeclaredfeatures.DefaultFramework
	v := utilversion.MustParseGeneric(version.Kubernetes)
	ours := &corev1.Node{Status: corev1.NodeStatus{DeclaredFeatures: NodeFeatures(version.Kubernetes)}}
	bare := &corev1.Node{}
	res := func(cpu string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}
	}
	old := &corev1.PodSpec{InitContainers: []corev1.Container{{Name: "init", Resources: res("100m")}}, Containers: []corev1.Container{{Name: "c"}}}
	initResized := old.DeepCopy()
	initResized.InitContainers[0].Resources = res("200m")
	podResized := old.DeepCopy()
	podResized.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
	for _, tc := range []struct {
		name     string
		spec     *corev1.PodSpec
		onOurs   bool
		onBare   bool
		unsatVia string
	}{
		{"init container resize", initResized, true, false, "InPlacePodVerticalScalingInitContainers"},
		{"pod-level resize", podResized, false, false, "InPlacePodLevelResourcesVerticalScaling"},
	} {
		reqs, err := fw.InferForPodUpdate(&nodedeclaredfeatures.PodInfo{Spec: old}, &nodedeclaredfeatures.PodInfo{Spec: tc.spec}, v)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []struct {
			node *corev1.Node
			want bool
		}{{ours, tc.onOurs}, {bare, tc.onBare}} {
			m, err := fw.MatchNode(reqs, n.node)
			if err != nil {
				t.Fatal(err)
			}
			if m.IsMatch != n.want {
				t.Errorf("%s on a node declaring %q: match %v, want %v (unsatisfied %q)", tc.name, n.node.Status.DeclaredFeatures, m.IsMatch, n.want, m.UnsatisfiedRequirements)
			}
			if !m.IsMatch && !slices.Equal(m.UnsatisfiedRequirements, []string{tc.unsatVia}) {
				t.Errorf("%s: unsatisfied %q, want %q", tc.name, m.UnsatisfiedRequirements, tc.unsatVia)
			}
		}
	}
}
