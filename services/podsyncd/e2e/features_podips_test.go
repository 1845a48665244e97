package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// TestTerminatingPodKeepsIPs runs issue 35's "Pod IPs ... during
// termination" on the real stack: a running pod held by a finalizer is
// deleted, its container traps SIGTERM and exits 42, and every status the
// API server shows from then on, until and including the Failed one
// written after the sandbox is stopped, still carries the podIP and
// podIPs the pod had while it ran.
func TestTerminatingPodKeepsIPs(t *testing.T) {
	s := startStack(t)
	const finalizer = "microlet.test/keep"
	p := s.Pod("ips-terminating", corev1.RestartPolicyNever,
		`sleep 3600 & pid=$!; trap 'kill $pid' TERM; touch /tmp/trapped; wait $pid; exit 42`)
	p.Finalizers = []string{finalizer}
	p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		PeriodSeconds: 1,
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/trapped"}}},
	}
	s.Create(p)
	pods := s.admin.CoreV1().Pods("default")
	t.Cleanup(func() {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		_, _ = pods.Patch(context.Background(), p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	})

	// Ready means the trap is set, so the TERM ends the shell with 42.
	running := s.WaitPod("default", p.Name, "ready with a pod IP", func(p *corev1.Pod) bool {
		return ready(p) && p.Status.PodIP != ""
	})
	wantIPs := running.Status.PodIPs
	t.Logf("running with podIP %s, podIPs %v", running.Status.PodIP, wantIPs)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, err := pods.Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", p.Name).String(),
		ResourceVersion: running.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	var final *corev1.Pod
	seen := 0
	for final == nil {
		ev, ok := <-w.ResultChan()
		if !ok {
			t.Fatalf("the watch ended before the pod was terminal (%d statuses seen)", seen)
		}
		if ev.Type == watch.Error || ev.Type == watch.Deleted {
			t.Fatalf("watch event %s before the pod was terminal: %v", ev.Type, ev.Object)
		}
		got, ok := ev.Object.(*corev1.Pod)
		if !ok {
			continue
		}
		seen++
		st := got.Status
		if st.PodIP != running.Status.PodIP || !equality.Semantic.DeepEqual(st.PodIPs, wantIPs) {
			t.Errorf("status %d (phase %s, deleting %v): podIP %q podIPs %v, want %q %v",
				seen, st.Phase, got.DeletionTimestamp != nil, st.PodIP, st.PodIPs, running.Status.PodIP, wantIPs)
		}
		if st.Phase == corev1.PodSucceeded || st.Phase == corev1.PodFailed {
			final = got
		}
	}
	t.Logf("%d statuses seen after the delete, the last %s", seen, final.Status.Phase)
	if final.Status.Phase != corev1.PodFailed || exitCode(final) != "42" {
		t.Errorf("terminal status phase %s, exit %s; want Failed, 42", final.Status.Phase, exitCode(final))
	}
}

// exitCode is the main container's exit code as text, or why there is none.
func exitCode(p *corev1.Pod) string {
	cs := containerStatus(p, "main")
	if cs == nil || cs.State.Terminated == nil {
		return fmt.Sprintf("none (status %+v)", cs)
	}
	return fmt.Sprint(cs.State.Terminated.ExitCode)
}
