package setters

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/evictionapi"
	"github.com/microlet/microlet/services/nodestatusd/internal/host"
	"github.com/microlet/microlet/services/nodestatusd/internal/sources"
)

func inputs(t *testing.T, rt *sources.RuntimeState) (*Inputs, *testingclock.FakeClock) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	th, err := evictionapi.Parse(evictionapi.Config{Hard: evictionapi.DefaultEvictionHard})
	if err != nil {
		t.Fatal(err)
	}
	reserved, err := ParseReserved(map[string]string{"cpu": "100m", "memory": "100Mi"})
	if err != nil {
		t.Fatal(err)
	}
	in := &Inputs{
		Now:      clk.Now,
		Hostname: "n1",
		NodeIPs:  []net.IP{net.ParseIP("10.0.0.5")},
		Facts:    host.Facts{NumCPU: 2, MemoryBytes: 4 << 30, OS: "linux", Arch: "amd64", KernelVersion: "6.1", HugePages: map[int64]int64{2 << 20: 4 << 20}},
		Stats: func() (host.Stats, error) {
			return host.Stats{MemoryCapacity: 4 << 30, MemoryAvailable: 2 << 30, Fs: host.FsStats{Capacity: 100 << 30, Available: 50 << 30}, PIDMax: 1000, PIDs: 10}, nil
		},
		Pressure:     NewPressure(func(context.Context) sources.PressureState { return sources.PressureState{Synchronized: true} }),
		EvictionHard: th,
		Reserved:     reserved,
		MaxPods:      DefaultMaxPods,
		MaxImages:    DefaultMaxImages,
		DaemonPort:   DefaultDaemonPort,
		Version:      "v-test",
		Extra:        NewConditions(nil),
	}
	if rt != nil {
		in.Runtime = func(context.Context) sources.RuntimeState { return *rt }
		in.RuntimeEndpoint = "unix:///x/runtime.sock"
	}
	return in, clk
}

func run(t *testing.T, in *Inputs, node *corev1.Node) {
	t.Helper()
	for _, s := range Defaults(in) {
		if err := s(context.Background(), node); err != nil {
			t.Fatal(err)
		}
	}
}

func cond(node *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == typ {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

func TestReadyFromCRI(t *testing.T) {
	rt := &sources.RuntimeState{RuntimeName: "fake", RuntimeVersion: "1"}
	in, clk := inputs(t, rt)
	node := &corev1.Node{}
	run(t, in, node)
	ready := cond(node, corev1.NodeReady)
	if ready == nil || ready.Status != corev1.ConditionTrue || ready.Reason != ReasonReady {
		t.Fatalf("ready = %+v", ready)
	}
	if last := node.Status.Conditions[len(node.Status.Conditions)-1]; last.Type != corev1.NodeReady {
		t.Fatalf("Ready is not last: %+v", node.Status.Conditions)
	}
	if node.Status.NodeInfo.ContainerRuntimeVersion != "fake://1" || node.Status.NodeInfo.KubeletVersion != "v-test" {
		t.Fatalf("node info = %+v", node.Status.NodeInfo)
	}
	first := ready.LastTransitionTime

	clk.Step(time.Minute)
	rt.NetworkReady = errors.New("container runtime network not ready: NetworkReady=false")
	run(t, in, node)
	ready = cond(node, corev1.NodeReady)
	if ready.Status != corev1.ConditionFalse || !strings.Contains(ready.Message, "NetworkReady=false") || ready.LastTransitionTime.Equal(&first) {
		t.Fatalf("network down: ready = %+v", ready)
	}
}

func TestNotReadyWithoutCRINamesSocket(t *testing.T) {
	ep := "unix:///tmp/none/runtime.sock"
	rt := &sources.RuntimeState{Err: fmt.Errorf("container runtime is down: %s did not answer", ep)}
	in, _ := inputs(t, rt)
	node := &corev1.Node{}
	run(t, in, node)
	ready := cond(node, corev1.NodeReady)
	if ready.Status != corev1.ConditionFalse || !strings.Contains(ready.Message, ep) {
		t.Fatalf("ready = %+v", ready)
	}
}

func TestCapacityAllocatable(t *testing.T) {
	in, _ := inputs(t, &sources.RuntimeState{})
	node := &corev1.Node{}
	run(t, in, node)
	c, a := node.Status.Capacity, node.Status.Allocatable
	if c.Cpu().MilliValue() != 2000 || a.Cpu().MilliValue() != 1900 {
		t.Fatalf("cpu %v / %v", c.Cpu(), a.Cpu())
	}
	// memory: 4Gi - 100Mi reserved - 100Mi eviction - 4Mi hugepages
	if want := int64(4<<30 - 200<<20 - 4<<20); a.Memory().Value() != want {
		t.Fatalf("allocatable memory %d, want %d", a.Memory().Value(), want)
	}
	// 100Gi less 10%, with the percentage a float32 as in the kubelet
	// (GetThresholdQuantity): 16 bytes more than an exact tenth.
	if a.StorageEphemeral().Value() != 100<<30-int64(float64(100<<30)*float64(float32(0.1))) {
		t.Fatalf("allocatable storage %v", a.StorageEphemeral())
	}
	if c.Pods().Value() != 110 {
		t.Fatalf("pods %v", c.Pods())
	}
	if q := c[corev1.ResourceName("hugepages-2Mi")]; q.Cmp(resource.MustParse("4Mi")) != 0 {
		t.Fatalf("hugepages %v", c)
	}
	if got := node.Status.Addresses; len(got) != 2 || got[0].Address != "10.0.0.5" || got[1].Type != corev1.NodeHostName {
		t.Fatalf("addresses %+v", got)
	}
	if node.Status.DaemonEndpoints.KubeletEndpoint.Port != DefaultDaemonPort {
		t.Fatalf("daemon endpoints %+v", node.Status.DaemonEndpoints)
	}
	for _, typ := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		if c := cond(node, typ); c == nil || c.Status != corev1.ConditionFalse {
			t.Fatalf("%s = %+v", typ, c)
		}
	}
}

func TestImagesCapped(t *testing.T) {
	rt := &sources.RuntimeState{}
	for i := range 60 {
		rt.Images = append(rt.Images, corev1.ContainerImage{Names: []string{"a", "b", "c", "d", "e", "f", "g"}, SizeBytes: int64(100 - i)})
	}
	in, _ := inputs(t, rt)
	node := &corev1.Node{}
	run(t, in, node)
	if len(node.Status.Images) != 50 || len(node.Status.Images[0].Names) != 5 {
		t.Fatalf("images %d, names %d", len(node.Status.Images), len(node.Status.Images[0].Names))
	}
}

func TestReportedConditions(t *testing.T) {
	in, _ := inputs(t, &sources.RuntimeState{})
	node := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: "OtherWriter", Status: corev1.ConditionTrue}}}}
	if err := in.Extra.Report("npd", []corev1.NodeCondition{{Type: "KernelDeadlock", Status: corev1.ConditionFalse}, {Type: "DiskRO", Status: corev1.ConditionFalse}}); err != nil {
		t.Fatal(err)
	}
	run(t, in, node)
	if cond(node, "KernelDeadlock") == nil || cond(node, "DiskRO") == nil || cond(node, "OtherWriter") == nil {
		t.Fatalf("conditions %+v", node.Status.Conditions)
	}
	if err := in.Extra.Report("npd", []corev1.NodeCondition{{Type: "KernelDeadlock", Status: corev1.ConditionTrue}}); err != nil {
		t.Fatal(err)
	}
	run(t, in, node)
	if c := cond(node, "KernelDeadlock"); c == nil || c.Status != corev1.ConditionTrue {
		t.Fatalf("KernelDeadlock %+v", c)
	}
	if cond(node, "DiskRO") != nil || cond(node, "OtherWriter") == nil {
		t.Fatalf("withdrawn type kept or other writer's clobbered: %+v", node.Status.Conditions)
	}
	for name, bad := range map[string]struct {
		rep   string
		conds []corev1.NodeCondition
	}{
		"empty reporter": {"", nil},
		"own type":       {"x", []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		"other's type":   {"y", []corev1.NodeCondition{{Type: "KernelDeadlock", Status: corev1.ConditionTrue}}},
		"bad status":     {"x", []corev1.NodeCondition{{Type: "A", Status: "Maybe"}}},
	} {
		if err := in.Extra.Report(bad.rep, bad.conds); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

// TestMachineInfoCacheFollowsTheFilesystem: with a MachineCache the lists
// are computed once and shared until the filesystem's size changes; a failed
// reading keeps the last size and is not cached.
func TestMachineInfoCacheFollowsTheFilesystem(t *testing.T) {
	var fsCap uint64 = 100 << 30
	var statsErr error
	in := &Inputs{
		Facts:   host.Facts{NumCPU: 2, MemoryBytes: 4 << 30},
		MaxPods: 110,
		Stats:   func() (host.Stats, error) { return host.Stats{Fs: host.FsStats{Capacity: fsCap}}, statsErr },
		Machine: &MachineCache{},
	}
	set := MachineInfo(in)
	a, b := &corev1.Node{}, &corev1.Node{}
	if err := set(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if err := set(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if reflect.ValueOf(a.Status.Capacity).Pointer() != reflect.ValueOf(b.Status.Capacity).Pointer() {
		t.Fatal("second sync computed the lists again")
	}
	fsCap = 200 << 30
	c := &corev1.Node{}
	if err := set(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if got := c.Status.Capacity[corev1.ResourceEphemeralStorage]; got.Value() != 200<<30 {
		t.Fatalf("ephemeral-storage %v after the filesystem grew", got.String())
	}
	statsErr = errors.New("statfs failed")
	if err := set(context.Background(), c); err == nil {
		t.Fatal("failed reading not reported")
	}
	if got := c.Status.Capacity[corev1.ResourceEphemeralStorage]; got.Value() != 200<<30 {
		t.Fatalf("ephemeral-storage %v after a failed reading, want the last size", got.String())
	}
}

// TestMachineInfoKeepsOthersResources: an extended resource someone patched
// into the Node's capacity stays there and in allocatable (as the kubelet
// keeps it; the scheduler's preemption specs rely on it), across cached
// syncs, without leaking into another node's lists; a hugepage size the
// machine no longer has is dropped.
func TestMachineInfoKeepsOthersResources(t *testing.T) {
	in := &Inputs{
		Facts:    host.Facts{NumCPU: 2, MemoryBytes: 4 << 30},
		MaxPods:  110,
		Stats:    func() (host.Stats, error) { return host.Stats{Fs: host.FsStats{Capacity: 100 << 30}}, nil },
		Machine:  &MachineCache{},
		Reserved: corev1.ResourceList{"example.com/dongle": resource.MustParse("1")},
	}
	set := MachineInfo(in)
	foo := corev1.ResourceName("scheduling.k8s.io/foo")
	for round := range 2 { // the second sync comes from the cache
		node := &corev1.Node{Status: corev1.NodeStatus{Capacity: corev1.ResourceList{
			foo: resource.MustParse("5"), "example.com/dongle": resource.MustParse("3"),
			"hugepages-1Gi": resource.MustParse("2Gi"), corev1.ResourceCPU: resource.MustParse("64"),
		}}}
		if err := set(context.Background(), node); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[corev1.ResourceName][2]string{
			foo: {"5", "5"}, "example.com/dongle": {"3", "2"}, corev1.ResourceCPU: {"2", "2"},
		} {
			c, a := node.Status.Capacity[name], node.Status.Allocatable[name]
			if c.String() != want[0] || a.String() != want[1] {
				t.Errorf("round %d: %s capacity %s allocatable %s, want %s and %s", round, name, c.String(), a.String(), want[0], want[1])
			}
		}
		if _, ok := node.Status.Capacity["hugepages-1Gi"]; ok {
			t.Errorf("round %d: a hugepage size the machine does not have is kept", round)
		}
	}
	plain := &corev1.Node{}
	if err := set(context.Background(), plain); err != nil {
		t.Fatal(err)
	}
	if _, ok := plain.Status.Capacity[foo]; ok {
		t.Error("another node's extended resource leaked into the shared lists")
	}
}

// TestReadyErrors: a reported reason turns Ready False with exactly the
// kubelet's message for it ("node is shutting down" alone when nothing
// else is wrong); clearing it turns Ready True again. Bad reports are
// refused naming the field, and repeating a report changes nothing.
func TestReadyErrors(t *testing.T) {
	rt := &sources.RuntimeState{RuntimeName: "fake", RuntimeVersion: "1"}
	in, _ := inputs(t, rt)
	pokes := 0
	in.ReadyErrors = NewReadyErrors(func() { pokes++ })
	node := &corev1.Node{}
	if changed, err := in.ReadyErrors.Report("podsyncd/nodeshutdown", []string{"node is shutting down"}); err != nil || !changed {
		t.Fatalf("Report = %v, %v", changed, err)
	}
	if changed, _ := in.ReadyErrors.Report("podsyncd/nodeshutdown", []string{"node is shutting down"}); changed || pokes != 1 {
		t.Fatalf("a repeated report changed something (pokes %d)", pokes)
	}
	run(t, in, node)
	ready := cond(node, corev1.NodeReady)
	if ready.Status != corev1.ConditionFalse || ready.Reason != ReasonNotReady || ready.Message != "node is shutting down" {
		t.Fatalf("ready = %+v, want False/KubeletNotReady/node is shutting down", ready)
	}
	if _, err := in.ReadyErrors.Report("podsyncd/nodeshutdown", nil); err != nil {
		t.Fatal(err)
	}
	run(t, in, node)
	if ready = cond(node, corev1.NodeReady); ready.Status != corev1.ConditionTrue {
		t.Fatalf("after clearing: ready = %+v", ready)
	}
	if _, err := in.ReadyErrors.Report("", []string{"x"}); err == nil || !strings.Contains(err.Error(), "reporter") {
		t.Fatalf("empty reporter: %v", err)
	}
	if _, err := in.ReadyErrors.Report("x", []string{"a", ""}); err == nil || !strings.Contains(err.Error(), "errors[1]") {
		t.Fatalf("empty error: %v", err)
	}
}

// TestRuntimeFeatures: the Node has a ready runtime's features; while the
// runtime is down or not ready, or reports none, they stay as they were.
func TestRuntimeFeatures(t *testing.T) {
	no := false
	rt := &sources.RuntimeState{RuntimeName: "fake", RuntimeVersion: "1"}
	in, _ := inputs(t, rt)
	node := &corev1.Node{}
	run(t, in, node)
	if node.Status.Features != nil {
		t.Fatalf("features = %+v from a runtime reporting none", node.Status.Features)
	}
	want := &corev1.NodeFeatures{SupplementalGroupsPolicy: &no}
	rt.Features = want
	run(t, in, node)
	if !reflect.DeepEqual(node.Status.Features, want) {
		t.Fatalf("features = %+v, want %+v", node.Status.Features, want)
	}
	for name, st := range map[string]sources.RuntimeState{
		"down":        {Err: errors.New("container runtime is down")},
		"not ready":   {RuntimeName: "fake", RuntimeReady: errors.New("container runtime not ready")},
		"no features": {RuntimeName: "fake"},
	} {
		*rt = st
		run(t, in, node)
		if !reflect.DeepEqual(node.Status.Features, want) {
			t.Errorf("runtime %s: features = %+v, want the last ones kept", name, node.Status.Features)
		}
	}
}

// TestRuntimeHandlers: the Node lists a ready runtime's handlers; while the
// runtime is down or not ready the last list stays.
func TestRuntimeHandlers(t *testing.T) {
	no, yes := false, true
	handlers := []corev1.NodeRuntimeHandler{{Name: "", Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &yes, UserNamespaces: &no}}}
	rt := &sources.RuntimeState{RuntimeName: "fake", RuntimeVersion: "1", Handlers: handlers}
	in, _ := inputs(t, rt)
	node := &corev1.Node{}
	run(t, in, node)
	if !reflect.DeepEqual(node.Status.RuntimeHandlers, handlers) {
		t.Fatalf("runtime handlers = %+v, want %+v", node.Status.RuntimeHandlers, handlers)
	}
	for name, st := range map[string]sources.RuntimeState{
		"down":      {Err: errors.New("container runtime is down")},
		"not ready": {RuntimeName: "fake", RuntimeReady: errors.New("container runtime not ready")},
	} {
		*rt = st
		run(t, in, node)
		if !reflect.DeepEqual(node.Status.RuntimeHandlers, handlers) {
			t.Errorf("runtime %s: handlers = %+v, want the last ones kept", name, node.Status.RuntimeHandlers)
		}
	}
}
