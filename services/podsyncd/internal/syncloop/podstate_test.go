package syncloop

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func statePod(uid types.UID, gen int64) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: string(uid), Namespace: "ns", UID: uid, Generation: gen}}
}

func uidsOf(pods []*corev1.Pod) []types.UID {
	out := make([]types.UID, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.UID)
	}
	slices.Sort(out)
	return out
}

// TestPodStateLifecycle walks one admitted pod through the loop's
// transitions, from its first ADD until it comes back after leaving its
// source, checking after each step what the loop reads of it.
func TestPodStateLifecycle(t *testing.T) {
	p := newPodStates()
	const uid = types.UID("u1")
	evicting := func(_ types.UID, s *podState) bool { return s.evicted != nil }
	step := func(name string, f func(t *testing.T)) {
		t.Helper()
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	step("first ADD knows nothing", func(t *testing.T) {
		if admitted, rejected, restarted := p.added(uid); admitted || rejected || restarted {
			t.Fatalf("added = %v, %v, %v; want nothing known", admitted, rejected, restarted)
		}
		if n := len(p.pods); n != 0 {
			t.Fatalf("%d entries for a pod nothing is known of", n)
		}
	})
	step("an UPDATE before admission keeps nothing", func(t *testing.T) {
		if p.updated(statePod(uid, 1)) {
			t.Fatal("updated says admitted")
		}
		if n := len(p.pods); n != 0 {
			t.Fatalf("%d entries after an UPDATE of an unadmitted pod", n)
		}
	})
	step("admitted and running", func(t *testing.T) {
		p.admit(statePod(uid, 1))
		if !p.updated(statePod(uid, 2)) {
			t.Fatal("updated says not admitted")
		}
		p.reported(uid, &corev1.PodStatus{Phase: corev1.PodRunning})
		if got := p.unfinished(nil); len(got) != 1 || got[0].Generation != 2 {
			t.Fatalf("unfinished = %v, want the updated pod", got)
		}
		if got := p.admittedUIDs(); !slices.Equal(got, []types.UID{uid}) {
			t.Fatalf("admittedUIDs = %v", got)
		}
		if s := p.get(uid); s.finished() || s.last.Phase != corev1.PodRunning {
			t.Fatalf("state %+v, want running and unfinished", s)
		}
	})
	step("evicted: left out of the active pods, still unfinished", func(t *testing.T) {
		p.evict(uid, eviction{message: "low on memory", condition: true})
		if got := p.unfinished(evicting); len(got) != 0 {
			t.Fatalf("active pods = %v while evicting", uidsOf(got))
		}
		if got := p.unfinished(nil); len(got) != 1 {
			t.Fatalf("unfinished = %v, want the evicted pod until it finishes", uidsOf(got))
		}
		if ev := p.get(uid).evicted; ev == nil || ev.message != "low on memory" || !ev.condition {
			t.Fatalf("evicted = %+v", ev)
		}
	})
	step("killed for the node shutdown and finished", func(t *testing.T) {
		p.killForShutdown(uid)
		p.reported(uid, &corev1.PodStatus{Phase: corev1.PodFailed})
		s := p.get(uid)
		if !s.shutdownKilled || !s.finished() {
			t.Fatalf("state %+v, want shut down and finished", s)
		}
		if got := p.unfinished(nil); len(got) != 0 {
			t.Fatalf("unfinished = %v after it finished", uidsOf(got))
		}
	})
	step("removed from its source", func(t *testing.T) {
		p.removed(uid, time.Unix(1000, 0), false)
		if s := p.get(uid); s.removed == nil || !s.removed.at.Equal(time.Unix(1000, 0)) || s.cleaned {
			t.Fatalf("state %+v, want removed, not cleaned", s)
		}
	})
	step("clean-up begins: no longer admitted, its reasons dropped", func(t *testing.T) {
		p.cleaningUp(uid)
		s := p.get(uid)
		if s.admitted != nil || s.last != nil || s.evicted != nil || s.shutdownKilled || s.cleaned {
			t.Fatalf("state %+v after the clean-up began", s)
		}
		if got := p.admittedUIDs(); len(got) != 0 {
			t.Fatalf("admittedUIDs = %v", got)
		}
	})
	step("clean-up ends", func(t *testing.T) {
		p.cleanedUp(uid)
		if !p.get(uid).cleaned {
			t.Fatal("not cleaned")
		}
	})
	step("back under the same UID: restarted once", func(t *testing.T) {
		if admitted, rejected, restarted := p.added(uid); admitted || rejected || !restarted {
			t.Fatalf("added = %v, %v, %v; want restarted only", admitted, rejected, restarted)
		}
		if _, _, restarted := p.added(uid); restarted {
			t.Fatal("a repeated ADD restarted it again")
		}
	})
	step("removed again: the clean-up is awaited anew, then nothing is kept", func(t *testing.T) {
		p.removed(uid, time.Unix(2000, 0), false)
		if p.get(uid).cleaned {
			t.Fatal("still cleaned after a new removal")
		}
		p.forgetRemovals(time.Unix(3000, 0))
		if n := len(p.pods); n != 0 {
			t.Fatalf("%d entries left: %+v", n, p.get(uid))
		}
	})
}

// TestPodStateRejected: a refused pod stays refused until it leaves its
// source; then it may be admitted again.
func TestPodStateRejected(t *testing.T) {
	p := newPodStates()
	const uid = types.UID("refused")
	p.reject(uid)
	if _, rejected, _ := p.added(uid); !rejected {
		t.Fatal("ADD of a refused pod not refused")
	}
	if !p.get(uid).rejected {
		t.Fatal("get says not refused")
	}
	if got := p.unfinished(nil); len(got) != 0 {
		t.Fatalf("a refused pod counts as active: %v", uidsOf(got))
	}
	p.reported(uid, &corev1.PodStatus{Phase: corev1.PodFailed, Reason: "OutOfcpu"})
	p.removed(uid, time.Unix(1000, 0), true)
	if s := p.get(uid); s.last != nil {
		t.Fatalf("the refusal's status outlives the pod's removal: %+v", s.last)
	}
	admitted, rejected, restarted := p.added(uid)
	if admitted || rejected || !restarted {
		t.Fatalf("added after removal = %v, %v, %v; want restarted only", admitted, rejected, restarted)
	}
}

// TestPodStateRefusedAPIPodLeavesNothing: a refused API pod, reported
// Failed, removed, and its removal forgotten, leaves no entry behind (the
// loop runs for months under churn of refused pods).
func TestPodStateRefusedAPIPodLeavesNothing(t *testing.T) {
	p := newPodStates()
	const uid = types.UID("refused-api")
	p.added(uid)
	p.reject(uid)
	p.reported(uid, &corev1.PodStatus{Phase: corev1.PodFailed, Reason: "OutOfmemory"})
	p.removed(uid, time.Unix(1000, 0), false)
	p.forgetRemovals(time.Unix(2000, 0))
	p.mu.Lock()
	n := len(p.pods)
	p.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d entries left of a refused pod that is gone, want 0: %+v", n, p.get(uid))
	}
}

// TestPodStateForgetRemovals: API pods' removals are forgotten once older
// than the cutoff; static pods' and newer ones are kept.
func TestPodStateForgetRemovals(t *testing.T) {
	p := newPodStates()
	cutoff := time.Unix(1000, 0)
	p.removed("old-api", cutoff.Add(-time.Second), false)
	p.removed("at-cutoff", cutoff, false)
	p.removed("old-static", cutoff.Add(-time.Hour), true)
	p.removed("old-admitted", cutoff.Add(-time.Second), false)
	p.admit(statePod("old-admitted", 1))
	p.forgetRemovals(cutoff)
	for _, tc := range []struct {
		uid      types.UID
		restarts bool
	}{{"old-api", false}, {"at-cutoff", true}, {"old-static", true}, {"old-admitted", false}} {
		if _, _, restarted := p.added(tc.uid); restarted != tc.restarts {
			t.Errorf("%s: restarted = %v, want %v", tc.uid, restarted, tc.restarts)
		}
	}
	if s := p.get("old-admitted"); s.admitted == nil {
		t.Error("forgetting the removal dropped the admission too")
	}
}

// TestPodStateUnfinished: the active pods are the admitted ones without a
// terminal status, less those skip names.
func TestPodStateUnfinished(t *testing.T) {
	p := newPodStates()
	for _, tc := range []struct {
		uid   types.UID
		phase corev1.PodPhase // "": nothing reported yet
	}{{"pending", ""}, {"running", corev1.PodRunning}, {"succeeded", corev1.PodSucceeded}, {"failed", corev1.PodFailed}} {
		p.admit(statePod(tc.uid, 1))
		if tc.phase != "" {
			p.reported(tc.uid, &corev1.PodStatus{Phase: tc.phase})
		}
	}
	p.reported("not-admitted", &corev1.PodStatus{Phase: corev1.PodRunning})
	if got, want := uidsOf(p.unfinished(nil)), []types.UID{"pending", "running"}; !slices.Equal(got, want) {
		t.Errorf("unfinished = %v, want %v", got, want)
	}
	skip := func(uid types.UID, _ *podState) bool { return uid == "running" }
	if got, want := uidsOf(p.unfinished(skip)), []types.UID{"pending"}; !slices.Equal(got, want) {
		t.Errorf("unfinished but running = %v, want %v", got, want)
	}
	if got := p.admittedUIDs(); len(got) != 4 {
		t.Errorf("admittedUIDs = %v, want the four admitted pods", got)
	}
}
