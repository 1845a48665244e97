package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/kernelparams"
)

// TestKubeletOnRuntimeShim starts the upstream kubelet on runtime-shim as
// the conformance harness's second column does, runs the envFrom pod of
// the ConfigMap spec on it (its log read through the API server, so the
// kubelet API's authentication and authorization are exercised), and
// checks that the kernel parameters the kubelet sets are back at their
// recorded values after Stop. It needs the kubelet, which only `make
// conformance RUNTIME_ONLY=1` (hack/build-kubelet.sh) builds, and root.
func TestKubeletOnRuntimeShim(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the upstream kubelet")
	}
	// The kubelet is not part of make test-deps (it is built only for
	// RUNTIME_ONLY conformance runs), so its absence is a choice, not a
	// missing host fact: skip rather than fail under the require switch.
	if _, err := FindKubelet(); errors.Is(err, controlplane.ErrMissingBinary) {
		t.Skipf("opt-in: the upstream kubelet is built only by make conformance RUNTIME_ONLY=1 (hack/build-kubelet.sh): %v", err)
	}
	kubelet := requireBuilt(t, "kubelet", FindKubelet)
	testenv.RequireRoot(t, "the kubelet")
	for _, f := range []string{"/bin/busybox", hostShell} {
		if _, err := os.Stat(f); err != nil {
			testenv.RequireOrSkip(t, "%v (apt-get install busybox-static bash-static)", err)
		}
	}
	cp := controlplane.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bins := testenv.Build(t, nil, "github.com/microlet/microlet/services/runtime-shim", "github.com/microlet/microlet/services/runtime-shim/pause", BusyboxShPackage)

	bb, err := busyboxTree("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	img, err := busyboxImage(bb, hostShell, filepath.Join(bins, "busybox-sh"))
	if err != nil {
		t.Fatal(err)
	}
	var log testenv.LockedBuffer
	if err := importImage(ctx, img, []string{BusyboxImage}, &log); err != nil {
		t.Fatal(err)
	}

	before, err := kernelparams.Read(KubeletSysctls)
	if err != nil {
		t.Fatal(err)
	}
	var kubeletOut, shimOut testenv.LockedBuffer
	k, err := StartKubelet(ctx, cp, KubeletOptions{Kubelet: kubelet, Bins: bins, KubeletOut: &kubeletOut, ShimOut: &shimOut})
	if err != nil {
		t.Fatalf("%v\nkubelet:\n%s\nruntime-shim:\n%s", err, tail(kubeletOut.String(), 20000), tail(shimOut.String(), 5000))
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			k.Stop()
		}
		if t.Failed() {
			t.Logf("kubelet (tail):\n%s\nruntime-shim (tail):\n%s", tail(kubeletOut.String(), 20000), tail(shimOut.String(), 5000))
		}
	})
	for name, v := range before {
		if k.Sysctls[name] != v {
			t.Errorf("recorded %s=%d, the host had %d", name, k.Sysctls[name], v)
		}
	}

	// The kubelet set its values (which Stop must undo).
	kubeletWants := map[string]int{
		utilsysctl.VMOvercommitMemory: utilsysctl.VMOvercommitMemoryAlways, utilsysctl.VMPanicOnOOM: utilsysctl.VMPanicOnOOMInvokeOOMKiller,
		utilsysctl.KernelPanic: utilsysctl.KernelPanicRebootTimeout, utilsysctl.KernelPanicOnOops: utilsysctl.KernelPanicOnOopsAlways,
		utilsysctl.RootMaxKeys: utilsysctl.RootMaxKeysSetting, utilsysctl.RootMaxBytes: utilsysctl.RootMaxBytesSetting,
	}
	during, err := kernelparams.Read(KubeletSysctls)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range kubeletWants {
		if during[name] != v {
			t.Errorf("with the kubelet running %s=%d, the kubelet sets %d", name, during[name], v)
		}
	}

	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	ns := "kubelet-" + rand.String(5)
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "data"}, Data: map[string]string{"data-1": "value-1"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "env", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName: k.Name, RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{
				Name: "env", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "env"},
				EnvFrom: []corev1.EnvFromSource{
					{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "data"}}},
					{Prefix: "p-", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "data"}}},
				},
			}},
		},
	}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the env pod Succeeded", 3*time.Minute, func() error {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "env", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodSucceeded {
			return fmt.Errorf("phase %s, containers %+v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		return nil
	})
	logs, err := admin.CoreV1().Pods(ns).GetLogs("env", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs through the API server and the kubelet API: %v", err)
	}
	for _, want := range []string{"data-1=value-1", "p-data-1=value-1"} {
		if !strings.Contains("\n"+string(logs), "\n"+want+"\n") {
			t.Errorf("the pod's env output lacks %s:\n%s", want, logs)
		}
	}

	k.Stop()
	stopped = true
	after, err := kernelparams.Read(KubeletSysctls)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range before {
		if after[name] != v {
			t.Errorf("after Stop %s=%d, was %d before the kubelet", name, after[name], v)
		}
	}
	if _, err := os.Stat(k.Dir); !os.IsNotExist(err) {
		t.Errorf("node directory %s left behind: %v", k.Dir, err)
	}
}
