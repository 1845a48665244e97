package admission

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/internal/podsource"
)

func node() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"disk": "ssd"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoExecute}}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("2"),
			corev1.ResourceMemory: resource.MustParse("1Gi"),
			corev1.ResourcePods:   resource.MustParse("3"),
		}},
	}
}

func pod(name, cpu string, mods ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{podsource.SourceAnnotation: podsource.FileSource}},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c"}}},
	}
	if cpu != "" {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

func hostPortMod(port int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: port}}
	}
}

func TestAdmit(t *testing.T) {
	apiPod := func(p *corev1.Pod) { p.Annotations[podsource.SourceAnnotation] = podsource.APISource }
	tests := []struct {
		name       string
		pod        *corev1.Pod
		running    []*corev1.Pod
		wantReason string
		wantMsg    string
	}{
		{name: "fits", pod: pod("a", "1")},
		{name: "too much cpu", pod: pod("a", "3"), wantReason: "OutOfcpu", wantMsg: "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"},
		{name: "cpu used by others", pod: pod("a", "1500m"), running: []*corev1.Pod{pod("b", "1")}, wantReason: "OutOfcpu", wantMsg: "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000"},
		{name: "too many pods", pod: pod("a", ""), running: []*corev1.Pod{pod("b", ""), pod("c", ""), pod("d", "")}, wantReason: "OutOfpods"},
		{name: "selector mismatch", pod: pod("a", "", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "hdd"} }), wantReason: "NodeAffinity", wantMsg: "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"},
		{name: "selector match", pod: pod("a", "", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "ssd"} })},
		{name: "host port clash", pod: pod("a", "", hostPortMod(8080)), running: []*corev1.Pod{pod("b", "", hostPortMod(8080))}, wantReason: "NodePorts"},
		{name: "different host ports", pod: pod("a", "", hostPortMod(8080)), running: []*corev1.Pod{pod("b", "", hostPortMod(8081))}},
		{name: "api pod untolerated NoExecute", pod: pod("a", "", apiPod), wantReason: "TaintToleration"},
		{name: "api pod tolerates", pod: pod("a", "", apiPod, func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
		})},
		{name: "static pod ignores taints", pod: pod("a", "")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Admit(tc.pod, node(), tc.running)
			if tc.wantReason == "" {
				if !r.Admit {
					t.Fatalf("rejected: %+v", r)
				}
				return
			}
			if r.Admit || r.Reason != tc.wantReason {
				t.Fatalf("got %+v, want reason %s", r, tc.wantReason)
			}
			if tc.wantMsg != "" && r.Message != tc.wantMsg {
				t.Fatalf("message = %q, want %q", r.Message, tc.wantMsg)
			}
		})
	}
}
