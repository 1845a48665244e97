package cache

import (
	"errors"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/services/statusd/internal/podstatus"
	"github.com/microlet/microlet/services/statusd/internal/store"
)

func openStore(t *testing.T, path string) *store.Store {
	t.Helper()
	s, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pod(uid string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "ns", UID: types.UID("uid-" + uid)},
		Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c"}}},
	}
}

func status(state corev1.ContainerState, ready bool) *corev1.PodStatus {
	return &corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "c", ContainerID: "docker://c1", State: state, Ready: ready}}}
}

var runningState = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
var doneState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}

func TestVersionsTransitionsAndReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	st := openStore(t, path)
	var changed []string
	c := New(st, WithOnChange(func(uid string) { changed = append(changed, uid) }))
	p := pod("a")
	snap, events, _, stop := c.Watch()
	defer stop()
	if len(snap) != 0 {
		t.Fatalf("snapshot %v", snap)
	}

	v, err := c.SetPodStatus(p, status(runningState, false))
	if err != nil || v != 1 {
		t.Fatalf("first set: v=%d err=%v", v, err)
	}
	if v, _ = c.SetPodStatus(p, status(runningState, false)); v != 1 {
		t.Fatalf("unchanged status got version %d", v)
	}
	if v, _ = c.SetContainerReadiness(string(p.UID), "docker://c1", true); v != 2 {
		t.Fatalf("readiness version %d", v)
	}
	e, _ := c.Get(string(p.UID))
	if !e.Status.ContainerStatuses[0].Ready {
		t.Fatal("readiness not applied")
	}
	if v, _ = c.SetPodStatus(p, status(doneState, false)); v != 3 {
		t.Fatalf("terminated version %d", v)
	}
	_, err = c.SetPodStatus(p, status(runningState, true))
	if !errors.Is(err, podstatus.ErrIllegalTransition) {
		t.Fatalf("illegal transition: %v", err)
	}
	if e, _ := c.Get(string(p.UID)); e.Version != 3 || e.Status.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("refused call changed the entry: %+v", e)
	}
	if _, err := c.SetContainerReadiness(string(p.UID), "docker://nope", true); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown container: %v", err)
	}
	if _, err := c.SetContainerReadiness("nope", "docker://c1", true); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown pod: %v", err)
	}
	bad := p.DeepCopy()
	bad.UID = ""
	if _, err := c.SetPodStatus(bad, status(runningState, false)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("missing uid: %v", err)
	}
	if n := len(events); n != 3 {
		t.Fatalf("%d watch events, want 3", n)
	}
	if len(changed) != 3 {
		t.Fatalf("%d change notifications, want 3", len(changed))
	}
	if carried := c.MarkSynced(string(p.UID), 3); carried != 3 {
		t.Fatalf("carried %d", carried)
	}

	// Reload from disk.
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = openStore(t, path)
	defer func() { _ = st.Close() }()
	c2 := New(st)
	if n, err := c2.Load(); err != nil || n != 1 {
		t.Fatalf("load: %d %v", n, err)
	}
	e, ok := c2.Get(string(p.UID))
	if !ok || e.Version != 3 || e.SyncedVersion != 0 || e.Status.ContainerStatuses[0].State.Terminated == nil || e.Pod.Spec.Containers[0].Name != "c" {
		t.Fatalf("reloaded entry %+v", e)
	}
	if v, err := c2.TerminatePod(p); err != nil || v != 4 {
		t.Fatalf("terminate: %d %v", v, err)
	}
	e, _ = c2.Get(string(p.UID))
	if e.Status.Phase != corev1.PodFailed {
		t.Fatalf("phase after terminate %s", e.Status.Phase)
	}
	removed, err := c2.RemoveOrphaned(nil)
	if err != nil || len(removed) != 1 {
		t.Fatalf("remove orphaned: %v %v", removed, err)
	}
	if recs, _ := st.Load(); len(recs) != 0 {
		t.Fatalf("store still holds %d records", len(recs))
	}
}

func TestWatchOverflow(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "s.db"))
	defer func() { _ = st.Close() }()
	c := New(st)
	_, events, overflowed, stop := c.Watch()
	defer stop()
	c.mu.Lock()
	for range WatchBuffer + 1 {
		c.publishLocked(Event{})
	}
	c.mu.Unlock()
	n := 0
	for range events {
		n++
	}
	if n != WatchBuffer || !overflowed() {
		t.Fatalf("got %d events, overflowed=%v", n, overflowed())
	}
}
