package server_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
)

// statusdBinary builds the real statusd once per test binary, into
// testenv.Build's directory, which TestMain (controlplane.Main) removes.
func statusdBinary(t *testing.T) string {
	t.Helper()
	return filepath.Join(testenv.Build(t, nil, "github.com/microlet/microlet/services/statusd"), "statusd")
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string // the process's output file
}

func startStatusd(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(t.TempDir(), "statusd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), log: logf.Name()}
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("statusd log:\n%s", b)
		}
	})
	return p
}

func (p *proc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// The real binary is SIGKILLed while clients are writing; after a restart
// every acknowledged status ends up in the API. Bad input and an illegal
// transition are refused with InvalidArgument over the real socket.
func TestDurabilityAcrossSIGKILL(t *testing.T) {
	e := newEnv(t)
	bin := statusdBinary(t)
	dir, err := shortTempDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeAll(dir) })
	args := []string{
		"--run-dir", dir, "--data-dir", filepath.Join(dir, "data"), "--node-name", e.node,
		"--kubeconfig", e.cp.NodeKubeconfig(e.node), "--mirror-pods=false", "--reconcile-period", "2s",
	}
	p := startStatusd(t, bin, args...)
	cc, err := grpcclient.Dial("unix://" + filepath.Join(dir, "statusd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	wctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := grpcclient.WaitServing(wctx, cc, ""); err != nil {
		t.Fatal(err)
	}
	client := statusdv1.NewStatusServiceClient(cc)

	const n = 20
	pods := make([]*corev1.Pod, n)
	raw := make([][]byte, n)
	for i := range pods {
		pods[i] = e.apiPod(t, fmt.Sprintf("p%02d", i), corev1.RestartPolicyAlways)
		raw[i], _ = pods[i].Marshal()
	}
	set := func(ctx context.Context, i int, r int32) error {
		sb, _ := runningStatus(r, r%2 == 0).Marshal()
		_, err := client.SetPodStatus(ctx, &statusdv1.SetPodStatusRequest{Pod: raw[i], Status: sb})
		return err
	}

	// Bad input and an illegal transition, over the socket.
	_, err = client.SetPodStatus(wctx, &statusdv1.SetPodStatusRequest{Pod: []byte("garbage")})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "pod") {
		t.Fatalf("garbage pod: %v", err)
	}
	never := e.apiPod(t, "never", corev1.RestartPolicyNever)
	nraw, _ := never.Marshal()
	done := &corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: "c", ContainerID: "docker://x",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}}}
	db, _ := done.Marshal()
	if _, err := client.SetPodStatus(wctx, &statusdv1.SetPodStatusRequest{Pod: nraw, Status: db}); err != nil {
		t.Fatal(err)
	}
	rb, _ := runningStatus(0, true).Marshal()
	_, err = client.SetPodStatus(wctx, &statusdv1.SetPodStatusRequest{Pod: nraw, Status: rb})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"c"`) {
		t.Fatalf("illegal transition: %v", err)
	}
	got, err := client.GetPodStatus(wctx, &statusdv1.GetPodStatusRequest{PodUid: string(never.UID)})
	if err != nil || got.GetEntry().GetVersion() != 1 {
		t.Fatalf("refused call changed the status: %v %v", got, err)
	}

	// Writers per pod, acknowledging in order; SIGKILL mid-stream.
	acked := make([]atomic.Int32, n)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			for r := int32(1); ; r++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := set(ctx, i, r)
				cancel()
				if err != nil {
					return
				}
				acked[i].Store(r)
			}
		})
	}
	testenv.Eventually(t, "over 200 writes acknowledged", waitTimeout, func() error {
		total := int32(0)
		for i := range n {
			total += acked[i].Load()
		}
		if total <= 200 {
			return fmt.Errorf("%d acknowledged", total)
		}
		return nil
	})
	p.kill9(t)
	close(stop)
	wg.Wait()
	final := make([]int32, n)
	for i := range n {
		final[i] = acked[i].Load()
		if final[i] == 0 {
			t.Fatalf("pod %d: no write acknowledged before the kill", i)
		}
	}
	t.Logf("acknowledged before SIGKILL: %v", final)

	startStatusd(t, bin, args...)
	eventually(t, "every acknowledged status in the API", func() error {
		for i := range n {
			got, err := getPod(t, e.admin, e.ns, pods[i].Name)
			if err != nil {
				return err
			}
			if restarts(got) < final[i] {
				return errorf("%s: restarts %d in the API, %d acknowledged", pods[i].Name, restarts(got), final[i])
			}
		}
		return nil
	})
}

// A bad setting is a one-line error naming the key, with exit code 2.
func TestBadConfigExits2(t *testing.T) {
	bin := statusdBinary(t)
	dir, err := shortTempDir()
	if err != nil {
		t.Fatal(err)
	}
	defer removeAll(dir)
	for _, tc := range []struct{ flag, key string }{
		{"--sync-workers=0", "sync_workers"},
		{"--kube-api-qps=0", "kube_api_qps"},
		{"--reconcile-period=-1s", "reconcile_period"},
	} {
		cmd := exec.Command(bin, "--run-dir", dir, "--data-dir", dir, tc.flag)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Fatalf("%s: err %v, output %s", tc.flag, err, out)
		}
		if !strings.Contains(string(out), tc.key) || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
			t.Fatalf("%s: want one line naming %s, got %q", tc.flag, tc.key, out)
		}
	}
}
