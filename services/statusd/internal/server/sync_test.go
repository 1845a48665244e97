package server_test

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A status reaches the API through the node's identity, and a condition
// another client wrote survives our later updates.
func TestStatusReachesAPIAndForeignConditionSurvives(t *testing.T) {
	e := newEnv(t)
	r := e.startRig(t, nil)
	pod := e.apiPod(t, "web", corev1.RestartPolicyAlways)

	if _, err := r.cache.SetPodStatus(pod, runningStatus(0, false)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Running in the API", func() error {
		p, err := getPod(t, e.admin, e.ns, "web")
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || restarts(p) != 0 || p.Status.StartTime == nil {
			return errorf("phase %s restarts %d", p.Status.Phase, restarts(p))
		}
		return nil
	})

	// Someone else (a controller) adds its own condition.
	foreign, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{
		{"type": "example.com/Gate", "status": "True", "reason": "Tested"},
	}}})
	if _, err := e.admin.CoreV1().Pods(e.ns).Patch(testCtx(t), "web", types.StrategicMergePatchType, foreign, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.cache.SetPodStatus(pod, runningStatus(1, true)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "second change with the foreign condition kept", func() error {
		p, err := getPod(t, e.admin, e.ns, "web")
		if err != nil {
			return err
		}
		if restarts(p) != 1 || condStatus(p, corev1.PodReady) != corev1.ConditionTrue {
			return errorf("restarts %d ready %s", restarts(p), condStatus(p, corev1.PodReady))
		}
		if condStatus(p, "example.com/Gate") != corev1.ConditionTrue {
			return errorf("foreign condition lost: %+v", p.Status.Conditions)
		}
		return nil
	})
	// The syncer records the version synced once the PATCH has returned,
	// which can be just after the API shows it.
	eventually(t, "the cache records the change as synced", func() error {
		if got, _ := r.cache.Get(string(pod.UID)); got.SyncedVersion != got.Version {
			return errorf("synced %d of version %d", got.SyncedVersion, got.Version)
		}
		return nil
	})
	// Readiness through the dedicated call, then the API reflects it.
	if _, err := r.cache.SetContainerReadiness(string(pod.UID), "docker://c-1", false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "readiness false in the API", func() error {
		p, err := getPod(t, e.admin, e.ns, "web")
		if err != nil {
			return err
		}
		if condStatus(p, corev1.PodReady) != corev1.ConditionFalse || condStatus(p, "example.com/Gate") != corev1.ConditionTrue {
			return errorf("conditions %+v", p.Status.Conditions)
		}
		return nil
	})
}

// A pod deleted and recreated under the same name: the old pod's status is
// dropped and never written onto the new pod.
func TestRecreatedPodDropsStatus(t *testing.T) {
	e := newEnv(t)
	r := e.startRig(t, nil)
	old := e.apiPod(t, "db", corev1.RestartPolicyAlways)
	if _, err := r.cache.SetPodStatus(old, runningStatus(0, true)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "old pod Running", func() error {
		p, err := getPod(t, e.admin, e.ns, "db")
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return errorf("phase %v err %v", p, err)
		}
		return nil
	})
	grace := int64(0)
	if err := e.admin.CoreV1().Pods(e.ns).Delete(testCtx(t), "db", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "old pod gone", func() error {
		if _, err := getPod(t, e.admin, e.ns, "db"); !isNotFound(err) {
			return errorf("still there: %v", err)
		}
		return nil
	})
	fresh := e.apiPod(t, "db", corev1.RestartPolicyAlways)
	// A late change for the old pod arrives after the recreation.
	if _, err := r.cache.SetPodStatus(old, runningStatus(7, true)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "old status dropped", func() error {
		if _, ok := r.cache.Get(string(old.UID)); ok {
			return errorf("old pod %s still cached", old.UID)
		}
		return nil
	})
	p, err := getPod(t, e.admin, e.ns, "db")
	if err != nil {
		t.Fatal(err)
	}
	if p.UID != fresh.UID || p.Status.Phase == corev1.PodRunning || restarts(p) == 7 {
		t.Fatalf("new pod got the old pod's status: %+v", p.Status)
	}
}

// A pod being deleted whose status is terminal and whose resources the node
// reclaimed is removed from the API (grace 0, UID precondition).
func TestTerminatedPodDeleted(t *testing.T) {
	e := newEnv(t)
	r := e.startRig(t, nil)
	pod := e.apiPod(t, "job", corev1.RestartPolicyNever)
	if _, err := r.cache.SetPodStatus(pod, runningStatus(0, true)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Running", func() error {
		p, err := getPod(t, e.admin, e.ns, "job")
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return errorf("pod %v err %v", p, err)
		}
		return nil
	})
	grace := int64(300)
	if err := e.admin.CoreV1().Pods(e.ns).Delete(testCtx(t), "job", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.cache.TerminatePod(pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Failed with ContainerStatusUnknown in the API", func() error {
		p, err := getPod(t, e.admin, e.ns, "job")
		if err != nil {
			return err
		}
		if p.DeletionTimestamp == nil || p.Status.Phase != corev1.PodFailed {
			return errorf("deletion %v phase %s", p.DeletionTimestamp, p.Status.Phase)
		}
		if cs := p.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != 137 {
			return errorf("containers %+v", cs)
		}
		return nil
	})
	// Not yet reclaimed: the object must stay.
	if _, err := getPod(t, e.admin, e.ns, "job"); err != nil {
		t.Fatalf("deleted before the node reported its resources reclaimed: %v", err)
	}
	if err := r.cache.ReportReclaimed(string(pod.UID)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod removed from the API", func() error {
		if _, err := getPod(t, e.admin, e.ns, "job"); !isNotFound(err) {
			return errorf("still there (err %v)", err)
		}
		return nil
	})
	eventually(t, "status dropped from the cache", func() error {
		if _, ok := r.cache.Get(string(pod.UID)); ok {
			return errorf("still cached")
		}
		return nil
	})
}

// With the API server down statusd keeps accepting; once it is back every
// accepted status reaches the API.
func TestAPIServerDownThenCatchUp(t *testing.T) {
	e := newEnv(t)
	r := e.startRig(t, nil)
	var pods []*corev1.Pod
	for _, n := range []string{"a", "b", "c"} {
		pods = append(pods, e.apiPod(t, n, corev1.RestartPolicyAlways))
	}
	eventually(t, "informer has the pods", func() error {
		for _, p := range pods {
			if _, err := r.cache.SetPodStatus(p, runningStatus(0, false)); err != nil {
				return err
			}
		}
		for _, p := range pods {
			if g, _ := r.cache.Get(string(p.UID)); g.SyncedVersion == 0 {
				return errorf("%s not synced", p.Name)
			}
		}
		return nil
	})
	if err := e.cp.StopAPIServer(); err != nil {
		// The harness reports an apiserver it had to SIGKILL; it is down either way.
		t.Logf("stop apiserver: %v", err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = e.cp.StartAPIServer()
		}
	})
	for i := int32(1); i <= 5; i++ {
		for _, p := range pods {
			if _, err := r.cache.SetPodStatus(p, runningStatus(i, i%2 == 0)); err != nil {
				t.Fatalf("not accepted while the API server is down: %v", err)
			}
		}
	}
	if err := e.cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	eventually(t, "every pod caught up", func() error {
		for _, p := range pods {
			got, err := getPod(t, e.admin, e.ns, p.Name)
			if err != nil {
				return err
			}
			if restarts(got) != 5 {
				return errorf("%s restarts %d", p.Name, restarts(got))
			}
		}
		return nil
	})
}
