package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/util/retry"

	"github.com/microlet/microlet/internal/testenv/registry"
)

// TestPodLifecycle proves on the real stack the pod-lifecycle behaviours
// Kubernetes' conformance suite checks: termination messages (file, non-root
// user at a custom path, FallbackToLogsOnError both ways, the previous
// instance's in lastState), activeDeadlineSeconds (set at creation and
// lowered on a running pod), status.observedGeneration and the conditions'
// following metadata.generation through quick spec updates, and the
// containers' resources and allocatedResources in the status.
func TestPodLifecycle(t *testing.T) {
	s := startStack(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer s.watchNodeReady(ctx)()

	t.Run("termination messages", func(t *testing.T) {
		s.t = t
		nonRoot := int64(1000)
		cases := []struct {
			name   string
			script string
			path   string
			policy corev1.TerminationMessagePolicy
			user   *int64
			phase  corev1.PodPhase
			want   string
		}{
			// runtime.go's four conformance variants and the default path.
			{"tm-file", "echo -n DONE > /dev/termination-log", "/dev/termination-log", corev1.TerminationMessageReadFile, nil, corev1.PodSucceeded, "DONE"},
			{"tm-nonroot", "echo -n DONE > /dev/termination-custom-log", "/dev/termination-custom-log", corev1.TerminationMessageReadFile, &nonRoot, corev1.PodSucceeded, "DONE"},
			{"tm-logs-failed", "echo -n DONE; /bin/false", "/dev/termination-log", corev1.TerminationMessageFallbackToLogsOnError, nil, corev1.PodFailed, "DONE"},
			{"tm-logs-succeeded", "echo -n DONE; /bin/true", "/dev/termination-log", corev1.TerminationMessageFallbackToLogsOnError, nil, corev1.PodSucceeded, ""},
			{"tm-file-over-logs", "echo -n OK > /dev/termination-log; echo DONE; /bin/true", "/dev/termination-log", corev1.TerminationMessageFallbackToLogsOnError, nil, corev1.PodSucceeded, "OK"},
			{"tm-deep-path", "echo -n DEEP > /var/run/app/msg; exit 4", "/var/run/app/msg", corev1.TerminationMessageReadFile, &nonRoot, corev1.PodFailed, "DEEP"},
		}
		for _, tc := range cases {
			p := s.Pod(tc.name, corev1.RestartPolicyNever, tc.script)
			c := &p.Spec.Containers[0]
			c.TerminationMessagePath, c.TerminationMessagePolicy = tc.path, tc.policy
			if tc.user != nil {
				c.SecurityContext = &corev1.SecurityContext{RunAsUser: tc.user}
			}
			s.Create(p)
		}
		for _, tc := range cases {
			got := s.WaitPod("default", tc.name, "finished", func(p *corev1.Pod) bool {
				return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
			})
			if got.Status.Phase != tc.phase {
				t.Errorf("%s: phase %s, want %s", tc.name, got.Status.Phase, tc.phase)
			}
			if len(got.Status.ContainerStatuses) != 1 || got.Status.ContainerStatuses[0].State.Terminated == nil {
				t.Errorf("%s: container not terminated: %+v", tc.name, got.Status.ContainerStatuses)
				continue
			}
			if msg := got.Status.ContainerStatuses[0].State.Terminated.Message; msg != tc.want {
				t.Errorf("%s: termination message %q, want %q", tc.name, msg, tc.want)
			}
		}

		// A restarted container: the failed instance's message is in
		// lastState, the running one starts with an empty file.
		p := s.Pod("tm-restart", corev1.RestartPolicyOnFailure,
			`if [ -f /data/once ]; then sleep 3600; fi; touch /data/once; echo -n FIRST > /dev/termination-log; exit 3`)
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		s.Create(p)
		got := s.WaitPod("default", "tm-restart", "running again after one failure", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil &&
				p.Status.ContainerStatuses[0].RestartCount == 1
		})
		last := got.Status.ContainerStatuses[0].LastTerminationState.Terminated
		if last == nil || last.ExitCode != 3 || last.Message != "FIRST" {
			t.Errorf("lastState = %+v, want exit 3 with message FIRST", last)
		}
		if out := s.execIn(got, "main", "cat", "/dev/termination-log"); out != "" {
			t.Errorf("the new instance's termination file holds %q, want it empty", out)
		}

		for _, tc := range cases {
			s.deletePod(tc.name)
		}
		s.deletePod("tm-restart")
	})

	t.Run("activeDeadlineSeconds", func(t *testing.T) {
		s.t = t
		// The shell ignores SIGTERM: a short grace period ends it sooner.
		pod := func(name string) *corev1.Pod {
			p := s.Pod(name, corev1.RestartPolicyAlways, "sleep 3600")
			grace := int64(2)
			p.Spec.TerminationGracePeriodSeconds = &grace
			return p
		}
		// Set at creation: nothing but the deadline's own timer fails it.
		short := pod("deadline-created")
		three := int64(3)
		short.Spec.ActiveDeadlineSeconds = &three
		s.Create(short)
		// Lowered on a running pod (pods.go's conformance test).
		s.Create(pod("deadline-updated"))
		s.WaitPod("default", "deadline-updated", "running", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning
		})
		five := int64(5)
		s.update(t, "deadline-updated", func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = &five })

		for _, name := range []string{"deadline-created", "deadline-updated"} {
			got := s.WaitPod("default", name, "failed with DeadlineExceeded", func(p *corev1.Pod) bool {
				return p.Status.Phase == corev1.PodFailed
			})
			if got.Status.Reason != "DeadlineExceeded" || got.Status.Message != "Pod was active on the node longer than the specified deadline" {
				t.Errorf("%s: reason %q message %q", name, got.Status.Reason, got.Status.Message)
			}
			ran := got.Status.ContainerStatuses[0].State.Terminated
			if ran == nil {
				t.Errorf("%s: container not terminated: %+v", name, got.Status.ContainerStatuses[0].State)
			} else if end := ran.FinishedAt.Sub(got.Status.StartTime.Time); end < time.Duration(*got.Spec.ActiveDeadlineSeconds)*time.Second-time.Second {
				t.Errorf("%s: killed %v after the start, before its %ds deadline", name, end, *got.Spec.ActiveDeadlineSeconds)
			}
			if c := condition(got, corev1.PodReady); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "PodFailed" {
				t.Errorf("%s: Ready condition %+v, want False/PodFailed", name, c)
			}
			if n := s.dockerRunning(string(got.UID)); n != 0 {
				t.Errorf("%s: %d containers still running", name, n)
			}
			s.Eventually("DeadlineExceeded event for "+name, time.Minute, func() (bool, string) {
				evs, err := s.admin.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
					FieldSelector: fields.Set{"involvedObject.name": name, "reason": "DeadlineExceeded"}.String()})
				if err != nil {
					return false, err.Error()
				}
				return len(evs.Items) > 0 && evs.Items[0].Type == corev1.EventTypeNormal, fmt.Sprintf("%d events", len(evs.Items))
			})
		}
		// Failed is final: the restart policy does not bring it back.
		again, err := s.Get("default", "deadline-created")
		if err != nil {
			t.Fatal(err)
		}
		if again.Status.Phase != corev1.PodFailed || again.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("deadline-created came back: phase %s restarts %d", again.Status.Phase, again.Status.ContainerStatuses[0].RestartCount)
		}
		s.deletePod("deadline-created")
		s.deletePod("deadline-updated")
	})

	t.Run("observedGeneration follows quick spec updates", func(t *testing.T) {
		s.t = t
		p := s.Pod("generation", corev1.RestartPolicyAlways, "sleep 3600")
		// sh ignores SIGTERM: replacing the container takes its whole grace period.
		grace := int64(30)
		p.Spec.TerminationGracePeriodSeconds = &grace
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: s.image, Command: []string{"true"}}}
		start := int64(5000)
		p.Spec.ActiveDeadlineSeconds = &start
		s.Create(p)
		generationsSeen := func(want int64) func(*corev1.Pod) bool {
			return func(p *corev1.Pod) bool {
				if p.Generation != want || p.Status.ObservedGeneration != want || len(p.Status.Conditions) == 0 {
					return false
				}
				for _, c := range p.Status.Conditions {
					if c.ObservedGeneration != want {
						return false
					}
				}
				return true
			}
		}
		s.WaitPod("default", "generation", "running with generation 1 observed", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && generationsSeen(1)(p)
		})
		const updates = 300
		for range updates {
			s.update(t, "generation", func(p *corev1.Pod) { *p.Spec.ActiveDeadlineSeconds-- })
		}
		// Metadata alone does not bump the generation.
		s.update(t, "generation", func(p *corev1.Pod) { p.Annotations = map[string]string{"touched": "yes"} })
		got := s.WaitPod("default", "generation", fmt.Sprintf("generation %d observed by status and every condition", 1+updates),
			generationsSeen(1+updates))
		for _, c := range []corev1.PodConditionType{corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
			if condition(got, c) == nil {
				t.Errorf("condition %s missing", c)
			}
		}
		if got.Status.Phase != corev1.PodRunning {
			t.Errorf("phase %s after spec updates, want Running", got.Status.Phase)
		}

		// A new image replaces the container; the new generation is
		// reported before the old container's 30 s grace period is over,
		// as the kubelet reports the status at the start of the sync.
		oldID := got.Status.ContainerStatuses[0].ContainerID
		webImage := strings.TrimSuffix(s.image, registry.Busybox) + registry.WebServer
		s.update(t, "generation", func(p *corev1.Pod) { p.Spec.Containers[0].Image = webImage })
		got = s.WaitPod("default", "generation", fmt.Sprintf("generation %d observed", 2+updates), generationsSeen(2+updates))
		if cs := got.Status.ContainerStatuses[0]; cs.ContainerID != oldID || cs.State.Running == nil {
			t.Errorf("the new generation was reported only after the old container stopped: %+v", cs)
		}
		s.WaitPod("default", "generation", "running the new image", func(p *corev1.Pod) bool {
			cs := p.Status.ContainerStatuses[0]
			return cs.ContainerID != oldID && cs.State.Running != nil && cs.Image == webImage
		})
		s.deletePod("generation")
	})

	t.Run("container resources and allocatedResources", func(t *testing.T) {
		s.t = t
		q := resource.MustParse
		p := s.Pod("resources", corev1.RestartPolicyAlways, "sleep 3600")
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: s.image, Command: []string{"true"},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("50m")}}}}
		spec := corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: q("200m"), corev1.ResourceMemory: q("64Mi")},
		}
		p.Spec.Containers[0].Resources = spec
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "besteffort", Image: s.image, Command: []string{"sleep", "3600"}})
		s.Create(p)
		got := s.WaitPod("default", "resources", "running", func(p *corev1.Pod) bool {
			if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 2 {
				return false
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Running == nil {
					return false
				}
			}
			return true
		})
		for _, cs := range got.Status.ContainerStatuses {
			switch cs.Name {
			case "main":
				if cs.Resources == nil || !equality.Semantic.DeepEqual(*cs.Resources, spec) {
					t.Errorf("main: resources %+v, want %+v (read back from the runtime)", cs.Resources, spec)
				}
				if !equality.Semantic.DeepEqual(cs.AllocatedResources, spec.Requests) {
					t.Errorf("main: allocatedResources %v, want %v", cs.AllocatedResources, spec.Requests)
				}
			case "besteffort":
				if cs.Resources == nil || len(cs.Resources.Requests)+len(cs.Resources.Limits) != 0 || cs.AllocatedResources != nil {
					t.Errorf("besteffort: resources %+v allocated %v, want empty", cs.Resources, cs.AllocatedResources)
				}
			}
		}
		if len(got.Status.InitContainerStatuses) != 1 {
			t.Fatalf("init statuses %+v", got.Status.InitContainerStatuses)
		}
		ics := got.Status.InitContainerStatuses[0]
		if ics.Resources == nil || !equality.Semantic.DeepEqual(ics.Resources.Requests, p.Spec.InitContainers[0].Resources.Requests) ||
			!equality.Semantic.DeepEqual(ics.AllocatedResources, p.Spec.InitContainers[0].Resources.Requests) {
			t.Errorf("init: resources %+v allocated %v, want the spec's request", ics.Resources, ics.AllocatedResources)
		}
		s.deletePod("resources")
	})
}

// update changes a default-namespace pod's spec through the API server,
// retrying on conflicts.
func (s *stack) update(t *testing.T, name string, change func(*corev1.Pod)) {
	t.Helper()
	pods := s.admin.CoreV1().Pods("default")
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := pods.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(p)
		_, err = pods.Update(context.Background(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("update pod %s: %v", name, err)
	}
}
