package envvars

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFieldValue pins every downward-API field path the kubelet resolves:
// the node-side ones (IPs from Info before the pod's status, the host's
// for a hostNetwork pod) and the metadata ones k8s.io/kubectl's fieldpath
// answers (a subscript names one label or annotation; the whole map is the
// sorted key="value" lines a downward-API volume file holds).
func TestFieldValue(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1",
			Labels:      map[string]string{"b": "2", "app": "web"},
			Annotations: map[string]string{"example.com/owner": `team "a"`}},
		Spec: corev1.PodSpec{NodeName: "n1", ServiceAccountName: "sa"},
		Status: corev1.PodStatus{PodIP: "10.0.0.9", PodIPs: []corev1.PodIP{{IP: "10.0.0.9"}, {IP: "fd00::9"}},
			HostIP: "192.168.1.9"},
	}
	hostNet := pod.DeepCopy()
	hostNet.Spec.HostNetwork = true
	onlyPodIP := pod.DeepCopy()
	onlyPodIP.Status.PodIPs = nil
	info := Info{PodIPs: []string{"10.0.0.7", "fd00::7"}, HostIPs: []string{"192.168.1.2", "fd01::2"}}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		info Info
		path string
		want string
	}{
		{"name", pod, info, "metadata.name", "p"},
		{"namespace", pod, info, "metadata.namespace", "ns"},
		{"uid", pod, info, "metadata.uid", "u1"},
		{"node name", pod, info, "spec.nodeName", "n1"},
		{"service account", pod, info, "spec.serviceAccountName", "sa"},
		{"host IP from info", pod, info, "status.hostIP", "192.168.1.2"},
		{"host IPs from info", pod, info, "status.hostIPs", "192.168.1.2,fd01::2"},
		{"pod IP from info", pod, info, "status.podIP", "10.0.0.7"},
		{"pod IPs from info", pod, info, "status.podIPs", "10.0.0.7,fd00::7"},
		{"pod IPs from the status", pod, Info{}, "status.podIPs", "10.0.0.9,fd00::9"},
		{"pod IP from the old field", onlyPodIP, Info{}, "status.podIP", "10.0.0.9"},
		{"host IP from the status", pod, Info{}, "status.hostIP", "192.168.1.9"},
		{"hostNetwork pod IPs are the host's", hostNet, info, "status.podIPs", "192.168.1.2,fd01::2"},
		{"no IPs yet", &corev1.Pod{}, Info{}, "status.podIP", ""},
		{"one label", pod, info, "metadata.labels['app']", "web"},
		{"a missing label", pod, info, "metadata.labels['nope']", ""},
		{"one annotation", pod, info, "metadata.annotations['example.com/owner']", `team "a"`},
		{"all labels", pod, info, "metadata.labels", "app=\"web\"\nb=\"2\""},
		{"all annotations", pod, info, "metadata.annotations", `example.com/owner="team \"a\""`},
		{"no labels", &corev1.Pod{}, info, "metadata.labels", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FieldValue(tc.pod, tc.path, tc.info)
			if err != nil || got != tc.want {
				t.Fatalf("FieldValue(%q) = %q, %v; want %q", tc.path, got, err, tc.want)
			}
		})
	}
	for _, path := range []string{"spec.hostname", "metadata.generation", "status.phase", "metadata.name['x']", "metadata.labels['not a key']"} {
		if got, err := FieldValue(pod, path, info); err == nil {
			t.Errorf("FieldValue(%q) = %q, want an error", path, got)
		}
	}
}

// TestResourceValue pins resourceFieldRef values as the kubelet computes
// them: requests and limits divided by the divisor (1 when unset) and
// rounded up, cpu in millicores; an unset or zero cpu, memory or
// ephemeral-storage limit is the node's allocatable; a hugepages limit is
// never defaulted (hugepages are not overcommitted, so a pod using them
// sets the limit); other resources are refused.
func TestResourceValue(t *testing.T) {
	q := resource.MustParse
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m")}}}},
		Containers: []corev1.Container{
			{Name: "main", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: q("250m"), corev1.ResourceMemory: q("100M"), "hugepages-2Mi": q("4Mi")},
				Limits: corev1.ResourceList{corev1.ResourceCPU: q("1500m"), corev1.ResourceMemory: q("0"),
					"hugepages-2Mi": q("4Mi"), corev1.ResourceEphemeralStorage: q("1Gi")}}},
			{Name: "bare"},
		},
	}}
	alloc := corev1.ResourceList{corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("8Gi"),
		corev1.ResourceEphemeralStorage: q("20Gi"), "hugepages-1Gi": q("2Gi"), "example.com/gpu": q("2")}
	main := &pod.Spec.Containers[0]
	for _, tc := range []struct {
		name      string
		self      *corev1.Container
		resource  string
		container string
		divisor   string
		want      string
	}{
		{"cpu limit, whole cores rounded up", main, "limits.cpu", "", "", "2"},
		{"cpu limit in millicores", main, "limits.cpu", "", "1m", "1500"},
		{"cpu request", main, "requests.cpu", "", "", "1"},
		{"cpu request in millicores", main, "requests.cpu", "", "1m", "250"},
		{"memory request rounded up", main, "requests.memory", "", "1Mi", "96"},
		{"zero memory limit is allocatable", main, "limits.memory", "", "1Gi", "8"},
		{"ephemeral-storage limit", main, "limits.ephemeral-storage", "", "1Mi", "1024"},
		{"unset limits are allocatable", &pod.Spec.Containers[1], "limits.cpu", "", "", "4"},
		{"unset ephemeral-storage limit is allocatable", &pod.Spec.Containers[1], "limits.ephemeral-storage", "", "1Gi", "20"},
		{"unset request is zero", &pod.Spec.Containers[1], "requests.memory", "", "", "0"},
		{"hugepages limit", main, "limits.hugepages-2Mi", "", "1Mi", "4"},
		{"hugepages request", main, "requests.hugepages-2Mi", "", "", "4194304"},
		{"unset hugepages limit is not allocatable", main, "limits.hugepages-1Gi", "", "", "0"},
		{"another container by name", main, "limits.cpu", "bare", "", "4"},
		{"an init container by name", main, "requests.cpu", "init", "1m", "100"},
		{"its own name", main, "limits.cpu", "main", "1m", "1500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := &corev1.ResourceFieldSelector{Resource: tc.resource, ContainerName: tc.container}
			if tc.divisor != "" {
				ref.Divisor = q(tc.divisor)
			}
			got, err := ResourceValue(pod, tc.self, ref, alloc)
			if err != nil || got != tc.want {
				t.Fatalf("ResourceValue(%s) = %q, %v; want %q", tc.resource, got, err, tc.want)
			}
		})
	}
	for _, ref := range []corev1.ResourceFieldSelector{
		{Resource: "limits.example.com/gpu"},
		{Resource: "cpu"},
		{Resource: "limits.cpu", ContainerName: "absent"},
	} {
		if got, err := ResourceValue(pod, main, &ref, alloc); err == nil {
			t.Errorf("ResourceValue(%+v) = %q, want an error", ref, got)
		}
	}
	if _, ok := main.Resources.Limits[corev1.ResourceMemory]; !ok || !main.Resources.Limits.Memory().IsZero() {
		t.Fatal("ResourceValue changed the container's limits")
	}
}
