package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv/node"
	supervisorv1 "github.com/microlet/microlet/proto/microlet/supervisor/v1"
)

// TestStatusReachesTheAPIAfterAStatusdOutage: statuses podsyncd could not
// hand statusd are resent until statusd takes them, also for pods that are
// never synced again. While statusd is frozen one pod finishes and another
// is deleted; their last statuses and the deleted pod's reclaim report
// fail. statusd is then killed, so it comes back with only what it had
// stored before the outage. The finished pod must still end Failed in the
// API with its exit code, and the deleted pod must be gone; before the
// resend, both stayed as they were when statusd froze (the soak found it:
// a pod that finished while statusd was down was never deleted).
func TestStatusReachesTheAPIAfterAStatusdOutage(t *testing.T) {
	s := startStack(t)
	s.WaitReady()
	// Each pod's container runs until a file appears, so the test decides
	// when it ends.
	const wait = "until [ -e /tmp/end ]; do sleep 0.2; done; exit 3"
	ends := s.Create(s.Pod("ends-in-outage", corev1.RestartPolicyNever, wait))
	deleted := s.Create(s.Pod("deleted-in-outage", corev1.RestartPolicyNever, wait))
	running := func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }
	ends = s.WaitPod(ends.Namespace, ends.Name, "Running", running)
	deleted = s.WaitPod(deleted.Namespace, deleted.Name, "Running", running)

	pid := s.componentPID(components.Statusd)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	s.execIn(ends, "main", "touch", "/tmp/end")
	one := int64(1)
	if err := s.admin.CoreV1().Pods(deleted.Namespace).Delete(context.Background(), deleted.Name,
		metav1.DeleteOptions{GracePeriodSeconds: &one}); err != nil {
		t.Fatal(err)
	}
	// Both pods' last reports time out against the frozen statusd.
	s.Eventually("podsyncd's reports of both pods failed", 3*time.Minute, func() (bool, string) {
		failed := map[string]bool{}
		for _, line := range strings.Split(s.out.String(), "\n") {
			if strings.Contains(line, "status report to statusd failed") {
				for _, p := range []*corev1.Pod{ends, deleted} {
					failed[p.Name] = failed[p.Name] || strings.Contains(line, "pod=default/"+p.Name+" ")
				}
			}
		}
		if !failed[ends.Name] || !failed[deleted.Name] {
			return false, fmt.Sprintf("failed reports seen: %v", failed)
		}
		return s.dockerRunning(string(deleted.UID)) == 0 && s.dockerRunning(string(ends.UID)) == 0, "containers still running"
	})
	// SIGKILL reaches a stopped process; the supervisor starts statusd again.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed = true

	got := s.WaitPod(ends.Namespace, ends.Name, "Failed with exit code 3", func(p *corev1.Pod) bool {
		if p.Status.Phase != corev1.PodFailed || len(p.Status.ContainerStatuses) != 1 {
			return false
		}
		term := p.Status.ContainerStatuses[0].State.Terminated
		return term != nil && term.ExitCode == 3
	})
	if got.DeletionTimestamp != nil {
		t.Fatalf("the finished pod is being deleted: %v", got.DeletionTimestamp)
	}
	s.WaitGone(deleted.Namespace, deleted.Name)
	s.deletePod(ends.Name)
}

// componentPID is the process ID of one of the node's services, from the
// supervisor.
func (s *stack) componentPID(name string) int {
	s.t.Helper()
	cc, err := grpcclient.Dial(filepath.Join(s.runDir, components.SupervisorSocket))
	if err != nil {
		s.t.Fatal(err)
	}
	defer cc.Close()
	var pid int32
	s.Eventually(name+" has a process", time.Minute, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cs, err := node.Components(ctx, supervisorv1.NewSupervisorServiceClient(cc))
		if err != nil {
			return false, err.Error()
		}
		c, ok := cs[name]
		if !ok {
			return false, name + " is not one of the components"
		}
		pid = c.GetPid()
		return pid != 0, name + " is starting"
	})
	return int(pid)
}
