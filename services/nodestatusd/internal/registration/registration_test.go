package registration

import (
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/internal/version"
	cloudsyncv1 "github.com/microlet/microlet/proto/microlet/cloudsync/v1"
)

func TestParseTaints(t *testing.T) {
	got, err := ParseTaints([]string{"a=b:NoSchedule", "example.com/c:NoExecute", " "})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != (corev1.Taint{Key: "a", Value: "b", Effect: corev1.TaintEffectNoSchedule}) || got[1].Key != "example.com/c" {
		t.Fatalf("taints %+v", got)
	}
	for _, bad := range []string{"a=b", "a:Maybe", "bad key:NoSchedule", "a=b b:NoSchedule"} {
		if _, err := ParseTaints([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := ParseTaints([]string{"a:NoSchedule", "a=x:NoSchedule"}); err == nil {
		t.Error("duplicate key and effect accepted")
	}
}

func TestValidateLabels(t *testing.T) {
	ok := map[string]string{"example.com/team": "x", "node.kubernetes.io/pool": "a", "foo.kubelet.kubernetes.io/x": "y", corev1.LabelTopologyZone: "z", "plain": ""}
	if err := ValidateLabels(ok); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []map[string]string{
		{"kubernetes.io/role": "x"},
		{"node-role.kubernetes.io/master": ""},
		{"k8s.io/x": "y"},
		{"a b": "c"},
		{"a": "b c"},
	} {
		if err := ValidateLabels(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if err := ValidateNodeName("Node_1"); err == nil {
		t.Error("bad node name accepted")
	}
}

func TestInitialNodeAndReconcile(t *testing.T) {
	md := &cloudsyncv1.GetInstanceMetadataResponse{ProviderId: "p://1", InstanceType: "big", Zone: "z", Region: "r"}
	o := Options{NodeName: "n1", Labels: map[string]string{corev1.LabelTopologyZone: "override"}, Unschedulable: true, ExternalCloudProvider: true,
		Taints: []corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}}}
	n := InitialNode(o, md, slog.Default())
	if n.Labels[corev1.LabelHostname] != "n1" || n.Labels[corev1.LabelInstanceType] != "big" || n.Labels[corev1.LabelTopologyZone] != "override" ||
		n.Labels[corev1.LabelFailureDomainBetaZone] != "z" || n.Spec.ProviderID != "p://1" {
		t.Fatalf("node %+v", n.ObjectMeta)
	}
	if len(n.Spec.Taints) != 2 || !n.Spec.Unschedulable {
		t.Fatalf("taints %+v (unschedulable must not be doubled)", n.Spec.Taints)
	}
	existing := &corev1.Node{}
	existing.Labels = map[string]string{corev1.LabelHostname: "old", "keep": "me"}
	if !ReconcileLabels(n, existing) || existing.Labels[corev1.LabelHostname] != "n1" || existing.Labels["keep"] != "me" {
		t.Fatalf("reconciled %v", existing.Labels)
	}
	if ReconcileLabels(n, existing) {
		t.Fatal("second reconcile reports a change")
	}
}

// TestVersionAnnotation: microlet's own version is an annotation, written
// at registration and brought up to date on a Node an older microlet
// registered; an agent that reports none leaves it alone.
func TestVersionAnnotation(t *testing.T) {
	n := InitialNode(Options{NodeName: "n1", MicroletVersion: "v0.9.0"}, nil, nil)
	if got := n.Annotations[version.AnnotationVersion]; got != "v0.9.0" {
		t.Fatalf("annotation %s = %q", version.AnnotationVersion, got)
	}
	if n.Annotations[AnnotationControllerManagedAttachDetach] != "true" {
		t.Fatalf("annotations %v", n.Annotations)
	}
	existing := n.DeepCopy()
	upgraded := InitialNode(Options{NodeName: "n1", MicroletVersion: "v1.0.0"}, nil, nil)
	if !ReconcileLabels(upgraded, existing) || existing.Annotations[version.AnnotationVersion] != "v1.0.0" {
		t.Fatalf("upgrade not reconciled: %v", existing.Annotations)
	}
	if ReconcileLabels(InitialNode(Options{NodeName: "n1"}, nil, nil), existing) || existing.Annotations[version.AnnotationVersion] != "v1.0.0" {
		t.Fatalf("no version reported, yet the annotation changed: %v", existing.Annotations)
	}
	if _, ok := InitialNode(Options{NodeName: "n1"}, nil, nil).Annotations[version.AnnotationVersion]; ok {
		t.Fatal("annotation set without a version")
	}
}
