package e2e

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/microlet/microlet/services/podsyncd/internal/admission"
)

// TestSupplementalGroupsPolicy follows the SupplementalGroupsPolicy feature
// (GA in 1.35) on the real stack: the runtime's Status says whether it can
// keep Strict, nodestatusd puts that on the Node (status.features), a
// Strict pod is refused at admission with the kubelet's reason and message
// where it cannot (Docker always merges the image's groups), and every
// container status carries the user its process runs as
// (status.containerStatuses[].user), which is what `id` inside says.
func TestSupplementalGroupsPolicy(t *testing.T) {
	s := startStack(t)
	st := s.runtimeStatus()
	if st.Features == nil {
		t.Fatal("the runtime's Status has no features")
	}
	strict := st.Features.SupplementalGroupsPolicy
	t.Logf("runtime keeps SupplementalGroupsPolicy Strict: %v", strict)

	s.Eventually("Node status.features.supplementalGroupsPolicy", 2*time.Minute, func() (bool, string) {
		n, err := s.admin.CoreV1().Nodes().Get(context.Background(), s.node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		f := n.Status.Features
		return f != nil && f.SupplementalGroupsPolicy != nil && *f.SupplementalGroupsPolicy == strict, fmt.Sprintf("features = %+v", f)
	})

	groups := func(name string, policy corev1.SupplementalGroupsPolicy) *corev1.Pod {
		p := s.Pod(name, corev1.RestartPolicyNever, "sleep 3600")
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](3000),
			SupplementalGroups: []int64{60000, 5}, SupplementalGroupsPolicy: &policy}
		return s.Create(p)
	}
	merge := groups("groups-merge", corev1.SupplementalGroupsPolicyMerge)
	strictPod := groups("groups-strict", corev1.SupplementalGroupsPolicyStrict)

	running := s.WaitPod("default", merge.Name, "running with its user", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil && p.Status.ContainerStatuses[0].User != nil
	})
	want := &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{UID: 1000, GID: 3000, SupplementalGroups: []int64{3000, 5, 60000}}}
	if got := running.Status.ContainerStatuses[0].User; !reflect.DeepEqual(got, want) {
		t.Errorf("container user = %+v, want %+v", got.Linux, want.Linux)
	}
	if out := strings.TrimSpace(s.execIn(running, "main", "id", "-G")); out != "3000 5 60000" {
		t.Errorf("id -G in the container = %q, want the user's groups 3000 5 60000", out)
	}

	if strict {
		s.WaitPod("default", strictPod.Name, "running", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
		})
		return
	}
	got := s.WaitPod("default", strictPod.Name, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	const msg = "SupplementalGroupsPolicy=Strict is not supported in this node"
	if got.Status.Reason != admission.ReasonSupplementalGroupsPolicyNotSupported || got.Status.Message != admission.RejectedMessagePrefix+msg {
		t.Errorf("strict pod: reason %q message %q, want %s / %s%s", got.Status.Reason, got.Status.Message,
			admission.ReasonSupplementalGroupsPolicyNotSupported, admission.RejectedMessagePrefix, msg)
	}
	if n := s.dockerRunning(string(got.UID)); n != 0 {
		t.Errorf("%d containers running for a refused pod", n)
	}
}
