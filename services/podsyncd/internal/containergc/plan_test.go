package containergc

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"
	testclock "k8s.io/utils/clock/testing"
)

var (
	exited  = runtimeapi.ContainerState_CONTAINER_EXITED
	running = runtimeapi.ContainerState_CONTAINER_RUNNING
	created = runtimeapi.ContainerState_CONTAINER_CREATED
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func ctr(id, uid, name string, age time.Duration, state runtimeapi.ContainerState) *runtimeapi.Container {
	return &runtimeapi.Container{
		Id: id, PodSandboxId: "sb-" + uid, State: state, CreatedAt: t0.Add(-age).UnixNano(),
		Metadata: &runtimeapi.ContainerMetadata{Name: name}, Labels: map[string]string{kubelettypes.KubernetesPodUIDLabel: uid},
	}
}

func ids(cs []*runtimeapi.Container) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Id)
	}
	slices.Sort(out)
	return out
}

func goneSet(uids ...string) Gone {
	return func(uid types.UID) bool { return slices.Contains(uids, string(uid)) }
}

func TestPlanContainers(t *testing.T) {
	clk := testclock.NewFakeClock(t0)
	cs := []*runtimeapi.Container{
		ctr("a1", "A", "app", 50*time.Minute, exited),
		ctr("a2", "A", "app", 40*time.Minute, exited),
		ctr("a3", "A", "app", 30*time.Minute, exited),
		ctr("a4", "A", "app", 20*time.Minute, running),
		ctr("s1", "A", "side", 45*time.Minute, exited),
		ctr("b1", "B", "app", 35*time.Minute, exited),
		ctr("b2", "B", "app", 25*time.Minute, exited),
		ctr("b3", "B", "app", 15*time.Minute, created),
		ctr("g1", "G", "app", 10*time.Minute, exited), // G is gone
		ctr("g2", "G", "app", 5*time.Minute, running), // running: never
	}
	for _, tc := range []struct {
		name   string
		policy Policy
		gone   Gone
		want   []string
	}{
		{"defaults keep the newest dead instance of each container", DefaultPolicy(), goneSet("G"),
			[]string{"a1", "a2", "b1", "b2", "g1"}},
		{"nothing is gone before the sources are ready", DefaultPolicy(), goneSet(),
			[]string{"a1", "a2", "b1", "b2"}},
		{"MaxPerPodContainer 2", Policy{MaxPerPodContainer: 2, MaxContainers: -1}, goneSet("G"),
			[]string{"a1", "b1", "g1"}},
		{"no per-container limit", Policy{MaxPerPodContainer: -1, MaxContainers: -1}, goneSet("G"),
			[]string{"g1"}},
		{"MaxPerPodContainer 0 still keeps the newest of a pod that exists", Policy{MaxPerPodContainer: 0, MaxContainers: -1}, goneSet(),
			[]string{"a1", "a2", "b1", "b2"}},
		{"MinAge spares young containers", Policy{MinAge: 32 * time.Minute, MaxPerPodContainer: 0, MaxContainers: -1}, goneSet("G"),
			// a3, b2, b3, g1 are younger than 32 min; a2 is the newest old-enough app of A, b1 of B.
			[]string{"a1"}},
		// 8 dead in 4 units (A/app, A/side, B/app, G/app): an even share
		// of 1 each, then the oldest first down to 2 — but never the
		// newest of a unit, so 4 stay.
		{"MaxContainers even share, newest always kept", Policy{MaxPerPodContainer: -1, MaxContainers: 2}, goneSet(),
			[]string{"a1", "a2", "b1", "b2"}},
		// G's go first; 7 dead in 3 units: a share of 6/3 = 2 per unit.
		{"MaxContainers share", Policy{MaxPerPodContainer: -1, MaxContainers: 6}, goneSet("G"),
			[]string{"a1", "b1", "g1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ids(PlanContainers(cs, tc.policy, clk.Now(), tc.gone))
			if !slices.Equal(got, tc.want) {
				t.Errorf("removed %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPlanContainersOldestFirstAcrossUnits: once every unit is at its share
// the oldest dead containers go first, whichever pod they belong to (a
// second instance of B/app is older than A's).
func TestPlanContainersOldestFirstAcrossUnits(t *testing.T) {
	cs := []*runtimeapi.Container{
		ctr("a1", "A", "app", 10*time.Minute, exited),
		ctr("a2", "A", "app", 5*time.Minute, exited),
		ctr("b1", "B", "app", 30*time.Minute, exited),
		ctr("b2", "B", "app", 20*time.Minute, exited),
		ctr("c1", "C", "app", 40*time.Minute, exited),
		ctr("c2", "C", "app", 1*time.Minute, exited),
	}
	// Share 5/3 = 1: a1, b1, c1 go and exactly 3 (≤ 5) remain.
	got := ids(PlanContainers(cs, Policy{MaxPerPodContainer: -1, MaxContainers: 5}, t0, goneSet()))
	if want := []string{"a1", "b1", "c1"}; !slices.Equal(got, want) {
		t.Errorf("removed %v, want %v", got, want)
	}
}

func TestPlanSandboxes(t *testing.T) {
	sb := func(id, uid string, age time.Duration, ready bool) *runtimeapi.PodSandbox {
		st := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		if ready {
			st = runtimeapi.PodSandboxState_SANDBOX_READY
		}
		return &runtimeapi.PodSandbox{Id: id, State: st, CreatedAt: t0.Add(-age).UnixNano(), Metadata: &runtimeapi.PodSandboxMetadata{Uid: uid}}
	}
	sbs := []*runtimeapi.PodSandbox{
		sb("a1", "A", 30*time.Minute, false), // holds a container: stays
		sb("a2", "A", 20*time.Minute, false), // empty, not newest: goes
		sb("a3", "A", 10*time.Minute, true),  // newest
		sb("b1", "B", 30*time.Minute, false), // empty, not newest: goes
		sb("b2", "B", 20*time.Minute, false), // newest of a pod still there: stays though dead
		sb("g1", "G", 20*time.Minute, false), // pod gone: goes
		sb("g2", "G", 10*time.Minute, true),  // ready: stays even though the pod is gone
	}
	remaining := []*runtimeapi.Container{{Id: "c", PodSandboxId: "a1"}}
	var got []string
	for _, s := range PlanSandboxes(sbs, remaining, goneSet("G")) {
		got = append(got, s.Id)
	}
	slices.Sort(got)
	if want := []string{"a2", "b1", "g1"}; !slices.Equal(got, want) {
		t.Errorf("removed %v, want %v", got, want)
	}
}

func TestPodUIDFromLogDir(t *testing.T) {
	for in, want := range map[string]types.UID{
		"default_web-0_0f1e2d3c-aaaa-bbbb-cccc-000000000001": "0f1e2d3c-aaaa-bbbb-cccc-000000000001",
		"kube_system_x_uid": "uid",
		"nounderscore":      "",
		"trailing_":         "",
	} {
		if got := PodUIDFromLogDir(in); got != want {
			t.Errorf("PodUIDFromLogDir(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPlanAcrossClockSteps: container ages come from their creation times,
// which the runtime dates by the wall clock. Stepped back a day, every
// container reads as created in the future. With the default policy (no
// minimum age) the dead containers of the gone pod G go at once, as they
// would without the step; with a 30-minute minimum age they go 30 minutes
// after the step, not a day and 30 minutes later; the newest instance of
// a pod that is still there is kept throughout. Stepped forward by days,
// every dead container is old enough.
func TestPlanAcrossClockSteps(t *testing.T) {
	cs := []*runtimeapi.Container{
		ctr("a1", "A", "app", 50*time.Minute, exited),
		ctr("a2", "A", "app", 40*time.Minute, exited),
		ctr("g1", "G", "app", 10*time.Minute, exited),
		ctr("g2", "G", "app", 5*time.Minute, exited),
		ctr("r1", "A", "side", 5*time.Minute, running),
	}
	for _, tc := range []struct {
		name  string
		p     Policy
		steps []time.Duration
		want  [][]string // removed after each step
	}{
		{"default policy", DefaultPolicy(),
			[]time.Duration{0, -24 * time.Hour, time.Minute},
			[][]string{{"a1", "g1", "g2"}, {"a1", "g1", "g2"}, {"a1", "g1", "g2"}}},
		{"30-minute minimum age", Policy{MinAge: 30 * time.Minute, MaxPerPodContainer: 1, MaxContainers: -1},
			[]time.Duration{0, -24 * time.Hour, 29 * time.Minute, time.Minute, -time.Hour, 29 * time.Minute, time.Minute},
			[][]string{{"a1"}, nil, nil, {"a1", "g1", "g2"}, nil, nil, {"a1", "g1", "g2"}}},
		{"a forward step", Policy{MinAge: 30 * time.Minute, MaxPerPodContainer: 1, MaxContainers: -1},
			[]time.Duration{0, 72 * time.Hour},
			[][]string{{"a1"}, {"a1", "g1", "g2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testclock.NewFakeClock(t0)
			g := New(nil, tc.p, Options{Clock: clk})
			for i, d := range tc.steps {
				clk.Step(d)
				if got := ids(g.plan(cs, goneSet("G"))); !slices.Equal(got, tc.want[i]) {
					t.Fatalf("after step %d (%v): removed %v, want %v", i, d, got, tc.want[i])
				}
			}
		})
	}
}
