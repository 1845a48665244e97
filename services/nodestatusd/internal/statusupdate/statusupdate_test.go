package statusupdate

import (
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStatusChangedIgnoresHeartbeats(t *testing.T) {
	t0, t1 := metav1.NewTime(time.Unix(1, 0)), metav1.NewTime(time.Unix(2, 0))
	a := &corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: t0}}}
	b := a.DeepCopy()
	b.Conditions[0].LastHeartbeatTime = t1
	if StatusChanged(a, b) {
		t.Fatal("heartbeat alone counted as a change")
	}
	b.Conditions[0].Status = corev1.ConditionFalse
	if !StatusChanged(a, b) {
		t.Fatal("status change missed")
	}
	c := a.DeepCopy()
	c.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}
	if !StatusChanged(a, c) {
		t.Fatal("address change missed")
	}
	d := a.DeepCopy()
	d.Conditions = append(d.Conditions, corev1.NodeCondition{Type: "X"})
	if !StatusChanged(a, d) {
		t.Fatal("new condition missed")
	}
}

// reference is the kubelet's comparison written plainly: heartbeat times
// cleared, conditions by type, then semantic deep equality.
func reference(a, b *corev1.NodeStatus) bool {
	x, y := a.DeepCopy(), b.DeepCopy()
	for _, s := range []*corev1.NodeStatus{x, y} {
		for i := range s.Conditions {
			s.Conditions[i].LastHeartbeatTime = metav1.Time{}
		}
		slices.SortFunc(s.Conditions, func(c, d corev1.NodeCondition) int { return strings.Compare(string(c.Type), string(d.Type)) })
	}
	return !equality.Semantic.DeepEqual(x, y)
}

// TestStatusChangedAgreesWithDeepEqual checks the hand-written comparison
// against the reference on a change to every field of the status, and on
// differences that are not changes (quantity spelling, time zone, order
// of conditions, nil against empty).
func TestStatusChangedAgreesWithDeepEqual(t *testing.T) {
	t0 := metav1.NewTime(time.Unix(100, 0).UTC())
	base := func() *corev1.NodeStatus {
		return &corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1900m")},
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "ok", LastHeartbeatTime: t0, LastTransitionTime: t0},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: t0, LastTransitionTime: t0},
			},
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: "n"}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo:        corev1.NodeSystemInfo{KernelVersion: "6.1", KubeletVersion: "v1"},
			Images:          []corev1.ContainerImage{{Names: []string{"a", "b"}, SizeBytes: 10}},
		}
	}
	cases := map[string]func(s *corev1.NodeStatus){
		"nothing":              func(*corev1.NodeStatus) {},
		"heartbeat":            func(s *corev1.NodeStatus) { s.Conditions[1].LastHeartbeatTime = metav1.NewTime(time.Unix(200, 0)) },
		"condition order":      func(s *corev1.NodeStatus) { s.Conditions[0], s.Conditions[1] = s.Conditions[1], s.Conditions[0] },
		"transition time zone": func(s *corev1.NodeStatus) { s.Conditions[0].LastTransitionTime = metav1.NewTime(t0.Local()) },
		"quantity spelling":    func(s *corev1.NodeStatus) { s.Capacity[corev1.ResourceCPU] = resource.MustParse("2000m") },
		"nil against empty":    func(s *corev1.NodeStatus) { s.VolumesInUse = []corev1.UniqueVolumeName{} },
		"condition status":     func(s *corev1.NodeStatus) { s.Conditions[0].Status = corev1.ConditionFalse },
		"condition message":    func(s *corev1.NodeStatus) { s.Conditions[0].Message = "changed" },
		"condition type":       func(s *corev1.NodeStatus) { s.Conditions[1].Type = corev1.NodeDiskPressure },
		"transition time":      func(s *corev1.NodeStatus) { s.Conditions[1].LastTransitionTime = metav1.NewTime(time.Unix(300, 0)) },
		"condition added":      func(s *corev1.NodeStatus) { s.Conditions = append(s.Conditions, corev1.NodeCondition{Type: "X"}) },
		"capacity value":       func(s *corev1.NodeStatus) { s.Capacity[corev1.ResourceCPU] = resource.MustParse("3") },
		"capacity added":       func(s *corev1.NodeStatus) { s.Capacity[corev1.ResourcePods] = resource.MustParse("110") },
		"allocatable":          func(s *corev1.NodeStatus) { s.Allocatable[corev1.ResourceCPU] = resource.MustParse("1") },
		"address":              func(s *corev1.NodeStatus) { s.Addresses[0].Address = "10.0.0.2" },
		"address order":        func(s *corev1.NodeStatus) { s.Addresses[0], s.Addresses[1] = s.Addresses[1], s.Addresses[0] },
		"daemon port":          func(s *corev1.NodeStatus) { s.DaemonEndpoints.KubeletEndpoint.Port = 1 },
		"node info":            func(s *corev1.NodeStatus) { s.NodeInfo.ContainerRuntimeVersion = "x://1" },
		"node info swap":       func(s *corev1.NodeStatus) { s.NodeInfo.Swap = &corev1.NodeSwapStatus{} },
		"image size":           func(s *corev1.NodeStatus) { s.Images[0].SizeBytes = 11 },
		"image name":           func(s *corev1.NodeStatus) { s.Images[0].Names[1] = "c" },
		"image added":          func(s *corev1.NodeStatus) { s.Images = append(s.Images, corev1.ContainerImage{Names: []string{"z"}}) },
		"phase":                func(s *corev1.NodeStatus) { s.Phase = corev1.NodeRunning },
		"volumes in use":       func(s *corev1.NodeStatus) { s.VolumesInUse = []corev1.UniqueVolumeName{"v"} },
		"volumes attached":     func(s *corev1.NodeStatus) { s.VolumesAttached = []corev1.AttachedVolume{{Name: "v"}} },
		"config":               func(s *corev1.NodeStatus) { s.Config = &corev1.NodeConfigStatus{Error: "e"} },
		"runtime handlers":     func(s *corev1.NodeStatus) { s.RuntimeHandlers = []corev1.NodeRuntimeHandler{{Name: "runc"}} },
		"features":             func(s *corev1.NodeStatus) { s.Features = &corev1.NodeFeatures{} },
		"declared features":    func(s *corev1.NodeStatus) { s.DeclaredFeatures = []string{"f"} },
		"runtime handler feature": func(s *corev1.NodeStatus) {
			s.RuntimeHandlers = []corev1.NodeRuntimeHandler{{Name: "runc", Features: &corev1.NodeRuntimeHandlerFeatures{}}}
		},
		"all conditions dropped": func(s *corev1.NodeStatus) { s.Conditions = nil },
	}
	for name, mutate := range cases {
		a, b := base(), base()
		mutate(b)
		want := reference(a, b)
		if got := StatusChanged(a, b); got != want {
			t.Errorf("%s: StatusChanged = %v, reference says %v", name, got, want)
		}
		if got := StatusChanged(b, a); got != want {
			t.Errorf("%s (swapped): StatusChanged = %v, reference says %v", name, got, want)
		}
	}
}

func BenchmarkStatusChanged(b *testing.B) {
	a := &corev1.NodeStatus{
		Capacity:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi"), corev1.ResourcePods: resource.MustParse("110")},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady}, {Type: corev1.NodeMemoryPressure}, {Type: corev1.NodeDiskPressure}, {Type: corev1.NodePIDPressure}},
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: "n"}},
		NodeInfo:   corev1.NodeSystemInfo{KernelVersion: "6.1", KubeletVersion: "v1", BootID: "b", MachineID: "m"},
	}
	a.Allocatable = a.Capacity.DeepCopy()
	c := a.DeepCopy()
	b.Run("handwritten", func(b *testing.B) {
		for b.Loop() {
			if StatusChanged(a, c) {
				b.Fatal("changed")
			}
		}
	})
	b.Run("reference", func(b *testing.B) {
		for b.Loop() {
			if reference(a, c) {
				b.Fatal("changed")
			}
		}
	})
}

// TestStatusChangedKnowsEveryField fails when NodeStatus gains a field:
// StatusChanged compares field by field and must learn the new one (add it
// there, to this list and to the cases above).
func TestStatusChangedKnowsEveryField(t *testing.T) {
	known := []string{"Capacity", "Allocatable", "Phase", "Conditions", "Addresses", "DaemonEndpoints", "NodeInfo",
		"Images", "VolumesInUse", "VolumesAttached", "Config", "RuntimeHandlers", "Features", "DeclaredFeatures"}
	var fields []string
	for _, f := range reflect.VisibleFields(reflect.TypeFor[corev1.NodeStatus]()) {
		fields = append(fields, f.Name)
	}
	slices.Sort(fields)
	slices.Sort(known)
	if !slices.Equal(fields, known) {
		t.Fatalf("NodeStatus fields %v, StatusChanged compares %v", fields, known)
	}
}
