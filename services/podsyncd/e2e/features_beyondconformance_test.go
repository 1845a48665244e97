package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// TestBeyondConformanceTag covers three [NodeConformance] specs outside the
// [Conformance] tag that microlet once failed: pod readiness gates, the
// ProbeWarning event of an HTTP probe redirected to another host, and the
// mode of a new subPath directory in a tmpfs emptyDir with an fsGroup.
func TestBeyondConformanceTag(t *testing.T) {
	s := startStack(t)
	ctx := context.Background()

	t.Run("readiness gates hold Ready until every gate's condition is True", func(t *testing.T) {
		s.t = t
		p := s.Pod("gated", corev1.RestartPolicyAlways, "sleep 3600")
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "k8s.io/test-condition1"}, {ConditionType: "k8s.io/test-condition2"}}
		s.Create(p)
		readyCond := func(p *corev1.Pod) *corev1.PodCondition {
			for i := range p.Status.Conditions {
				if p.Status.Conditions[i].Type == corev1.PodReady {
					return &p.Status.Conditions[i]
				}
			}
			return nil
		}
		got := s.WaitPod("default", "gated", "running, containers ready, not Ready for its gates", func(p *corev1.Pod) bool {
			c := readyCond(p)
			return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready &&
				c != nil && c.Status == corev1.ConditionFalse
		})
		want := `corresponding condition of pod readiness gate "k8s.io/test-condition1" does not exist., corresponding condition of pod readiness gate "k8s.io/test-condition2" does not exist.`
		if c := readyCond(got); c.Reason != "ReadinessGatesNotReady" || c.Message != want {
			t.Fatalf("Ready condition %+v, want ReadinessGatesNotReady %q", c, want)
		}
		// Another controller sets the gates, as the e2e spec does: a
		// strategic merge patch of status.conditions.
		setGates := func(c1, c2 corev1.ConditionStatus) {
			t.Helper()
			now := metav1.Now()
			patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{
				{Type: "k8s.io/test-condition1", Status: c1, LastTransitionTime: now},
				{Type: "k8s.io/test-condition2", Status: c2, LastTransitionTime: now},
			}}})
			if _, err := s.admin.CoreV1().Pods("default").Patch(ctx, "gated", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
				t.Fatal(err)
			}
		}
		gatesKept := func(p *corev1.Pod, c1, c2 corev1.ConditionStatus) bool {
			seen := map[corev1.PodConditionType]corev1.ConditionStatus{}
			for _, c := range p.Status.Conditions {
				seen[c.Type] = c.Status
			}
			return seen["k8s.io/test-condition1"] == c1 && seen["k8s.io/test-condition2"] == c2
		}
		setGates(corev1.ConditionTrue, corev1.ConditionFalse)
		s.WaitPod("default", "gated", "not Ready with one gate False", func(p *corev1.Pod) bool {
			c := readyCond(p)
			return c != nil && c.Status == corev1.ConditionFalse && c.Message == `the status of pod readiness gate "k8s.io/test-condition2" is not "True", but False`
		})
		setGates(corev1.ConditionTrue, corev1.ConditionTrue)
		got = s.WaitPod("default", "gated", "Ready once both gates are True", func(p *corev1.Pod) bool { return ready(p) })
		// statusd's own write (Ready True) kept what the other writer put there.
		if !gatesKept(got, corev1.ConditionTrue, corev1.ConditionTrue) {
			t.Fatalf("gate conditions lost by the node's status write: %+v", got.Status.Conditions)
		}
		setGates(corev1.ConditionFalse, corev1.ConditionTrue)
		got = s.WaitPod("default", "gated", "not Ready again once a gate goes False", func(p *corev1.Pod) bool {
			c := readyCond(p)
			return c != nil && c.Status == corev1.ConditionFalse && c.Reason == "ReadinessGatesNotReady"
		})
		if !gatesKept(got, corev1.ConditionFalse, corev1.ConditionTrue) {
			t.Fatalf("gate conditions lost by the node's status write: %+v", got.Status.Conditions)
		}
		s.deletePod("gated")
	})

	t.Run("an HTTP liveness probe redirected to another host warns and does not restart", func(t *testing.T) {
		s.t = t
		// busybox httpd runs a non-parsed-header CGI that redirects to
		// another host name (never contacted: the probe does not follow).
		script := `mkdir -p /www/cgi-bin && printf '#!/bin/sh\nprintf "HTTP/1.0 302 Found\\r\\nLocation: http://localhost:9/elsewhere\\r\\nContent-Type: text/plain\\r\\n\\r\\nmoved away"\n' > /www/cgi-bin/nph-redirect && chmod 755 /www/cgi-bin/nph-redirect && exec httpd -f -p 8080 -h /www`
		p := s.Pod("redirected", corev1.RestartPolicyAlways, script)
		p.Spec.Containers[0].LivenessProbe = &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/cgi-bin/nph-redirect", Port: intstr.FromInt32(8080)}},
			InitialDelaySeconds: 1, PeriodSeconds: 1, FailureThreshold: 1,
		}
		s.Create(p)
		s.waitEvent(t, "default", "redirected", "ProbeWarning", "Liveness probe warning: Probe terminated redirects, Response body: moved away")
		got, err := s.Get("default", "redirected")
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Status.ContainerStatuses) != 1 || got.Status.ContainerStatuses[0].RestartCount != 0 || got.Status.ContainerStatuses[0].State.Running == nil {
			t.Fatalf("container restarted or not running after warnings: %+v", got.Status.ContainerStatuses)
		}
		list, err := s.admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=redirected,reason=Unhealthy"})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 0 {
			t.Fatalf("a redirect counted as a probe failure: %s", list.Items[0].Message)
		}
		s.deletePod("redirected")
	})

	t.Run("a new subPath in a tmpfs emptyDir with an fsGroup is setgid, sticky and 0777", func(t *testing.T) {
		s.t = t
		p := s.Pod("subpath-fsgroup", corev1.RestartPolicyNever, "stat -c '%a %u %g' /test-volume; grep ' /test-volume ' /proc/mounts | cut -d' ' -f3")
		p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To[int64](123), RunAsUser: ptr.To[int64](1001)}
		p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "v", MountPath: "/test-volume", SubPath: "test-sub"}}
		s.Create(p)
		s.WaitPod("default", "subpath-fsgroup", "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		// 3777: setgid and sticky over rwxrwxrwx (Go's dgtrwxrwxrwx, what
		// the spec's mounttest prints), owned by root, group the fsGroup.
		if out, want := s.logs(t, "default", "subpath-fsgroup", "main"), fmt.Sprintf("3777 0 123\n%s", "tmpfs"); out != want {
			t.Fatalf("subPath directory: %q, want %q", out, want)
		}
		s.deletePod("subpath-fsgroup")
	})
}
