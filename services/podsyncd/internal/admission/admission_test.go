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
			corev1.ResourceCPU:              resource.MustParse("2"),
			corev1.ResourceMemory:           resource.MustParse("1Gi"),
			corev1.ResourcePods:             resource.MustParse("3"),
			corev1.ResourceEphemeralStorage: resource.MustParse("10Gi"),
			"hugepages-2Mi":                 resource.MustParse("0"),
			"example.com/gpu":               resource.MustParse("1"),
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

func request(name, q string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Spec.Containers[0].Resources.Requests == nil {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{}
		}
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceName(name)] = resource.MustParse(q)
	}
}

func groupsPolicy(p corev1.SupplementalGroupsPolicy) func(*corev1.Pod) {
	return func(pod *corev1.Pod) {
		pod.Spec.SecurityContext = &corev1.PodSecurityContext{SupplementalGroupsPolicy: &p}
	}
}

func groupsFeature(supported bool) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Status.Features = &corev1.NodeFeatures{SupplementalGroupsPolicy: &supported} }
}

func TestAdmit(t *testing.T) {
	apiPod := func(p *corev1.Pod) { p.Annotations[podsource.SourceAnnotation] = podsource.APISource }
	tests := []struct {
		name       string
		pod        *corev1.Pod
		running    []*corev1.Pod
		nodeMod    func(*corev1.Node)
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
		{name: "ephemeral-storage over allocatable", pod: pod("a", "", request("ephemeral-storage", "11Gi")), wantReason: "OutOfephemeral-storage",
			wantMsg: "Node didn't have enough resource: ephemeral-storage, requested: 11811160064, used: 0, capacity: 10737418240"},
		{name: "ephemeral-storage used by others", pod: pod("a", "", request("ephemeral-storage", "6Gi")), running: []*corev1.Pod{pod("b", "", request("ephemeral-storage", "5Gi"))},
			wantReason: "OutOfephemeral-storage", wantMsg: "Node didn't have enough resource: ephemeral-storage, requested: 6442450944, used: 5368709120, capacity: 10737418240"},
		{name: "hugepages the node has none of", pod: pod("a", "", request("hugepages-2Mi", "2Mi")), wantReason: "OutOfhugepages-2Mi",
			wantMsg: "Node didn't have enough resource: hugepages-2Mi, requested: 2097152, used: 0, capacity: 0"},
		{name: "extended resource the node has", pod: pod("a", "", request("example.com/gpu", "1"))},
		{name: "extended resource over what the node has", pod: pod("a", "", request("example.com/gpu", "2")), wantReason: "OutOfexample.com/gpu"},
		{name: "extended resource the node does not know is left out", pod: pod("a", "", request("example.com/fpga", "5"))},
		{name: "resources before the node selector", pod: pod("a", "3", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "hdd"} }), wantReason: "OutOfcpu"},
		{name: "os label of another OS", pod: pod("a", "3", func(p *corev1.Pod) { p.Labels = map[string]string{corev1.LabelOSStable: "windows"} }),
			wantReason: "PodOSSelectorNodeLabelDoesNotMatch", wantMsg: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"},
		{name: "os field of another OS", pod: pod("a", "", func(p *corev1.Pod) { p.Spec.OS = &corev1.PodOS{Name: corev1.Windows} }),
			wantReason: "PodOSNotSupported", wantMsg: "Failed to admit pod as the OS field doesn't match node OS"},
		{name: "os field linux", pod: pod("a", "", func(p *corev1.Pod) { p.Spec.OS = &corev1.PodOS{Name: corev1.Linux} })},
		{name: "strict groups on a node without the feature", pod: pod("a", "", groupsPolicy(corev1.SupplementalGroupsPolicyStrict)),
			wantReason: "SupplementalGroupsPolicyNotSupported", wantMsg: "SupplementalGroupsPolicy=Strict is not supported in this node"},
		{name: "strict groups on a node saying false", pod: pod("a", "", groupsPolicy(corev1.SupplementalGroupsPolicyStrict)),
			nodeMod: groupsFeature(false), wantReason: "SupplementalGroupsPolicyNotSupported"},
		{name: "strict groups on a node with the feature", pod: pod("a", "", groupsPolicy(corev1.SupplementalGroupsPolicyStrict)), nodeMod: groupsFeature(true)},
		{name: "merge groups on a node without the feature", pod: pod("a", "", groupsPolicy(corev1.SupplementalGroupsPolicyMerge))},
		{name: "groups policy before resources", pod: pod("a", "3", groupsPolicy(corev1.SupplementalGroupsPolicyStrict)), wantReason: "SupplementalGroupsPolicyNotSupported"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := node()
			if tc.nodeMod != nil {
				tc.nodeMod(n)
			}
			r := Admit(tc.pod, n, tc.running)
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

func TestRejectedStatus(t *testing.T) {
	st := RejectedStatus(pod("a", "1"), Result{Reason: "NodeShutdown", Message: "Pod was rejected as the node is shutting down."})
	// The kubelet's rejectPod prefixes every handler's message, its own
	// included.
	want := corev1.PodStatus{Phase: corev1.PodFailed, Reason: "NodeShutdown", QOSClass: corev1.PodQOSBurstable,
		Message: "Pod was rejected: Pod was rejected as the node is shutting down."}
	if st.Phase != want.Phase || st.Reason != want.Reason || st.Message != want.Message || st.QOSClass != want.QOSClass {
		t.Fatalf("status %+v, want %+v", st, want)
	}
}
