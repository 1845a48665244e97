package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"sigs.k8s.io/yaml"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/node"
	"github.com/microlet/microlet/internal/testenv/registry"
	"github.com/microlet/microlet/internal/testenv/shim"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
)

// notAnswering is the warning podsyncd logs while the runtime endpoint does
// not answer (internal/criclient).
const notAnswering = "CRI endpoint not answering; retrying"

// podsyncd started before its runtime's socket exists (runtime-shim not
// started yet, or restarting) keeps running: it warns, naming the
// endpoint, and does not serve. Once runtime-shim starts on that socket it
// waits the same way for its image endpoint, a second path that appears
// later (a symlink to runtime-shim's socket) — where podsyncd used to
// exit, cri-client's image service constructor failing its check — and
// then connects and runs the static pod it was given. Standalone processes
// (podconfig, statusd, podsyncd, runtime-shim) rather than `microlet run`,
// whose supervisor would start podsyncd only after the runtime served.
func TestPodsyncdBeforeRuntime(t *testing.T) {
	bins := testenv.Build(t, nil, "github.com/microlet/microlet/services/podconfig",
		"github.com/microlet/microlet/services/statusd", "github.com/microlet/microlet/services/podsyncd")
	reg := registry.Start(t)
	dir := testenv.ShortDir(t, "late")
	runDir, manifests := filepath.Join(dir, "run"), filepath.Join(dir, "manifests")
	for _, d := range []string{runDir, manifests} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	nodeName, instance := "late-"+rand.String(5), "late-"+rand.String(8)
	// Registered first, so it runs after every process stopped: the pod's
	// containers (by runtime-shim's label) and podsyncd's cgroup root.
	t.Cleanup(func() { node.RemoveDockerObjects(instance) })

	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "late-runtime", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Image: reg.Image(registry.Busybox), ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"},
		}}},
	}
	data, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(manifests, "late-runtime.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}

	common := func(svc string) []string {
		return []string{"--run-dir=" + runDir, "--data-dir=" + filepath.Join(dir, "data", svc), "--node-name=" + nodeName}
	}
	testenv.StartProcess(t, "podconfig", filepath.Join(bins, "podconfig"), append(common("podconfig"), "--manifest-dir="+manifests)...)
	testenv.StartProcess(t, "statusd", filepath.Join(bins, "statusd"), common("statusd")...)
	endpoint := components.Endpoint(runDir, components.RuntimeShim)
	imageSocket := filepath.Join(dir, "img.sock")
	cfg := node.Config{Dir: dir, Instance: instance}
	podsyncd := testenv.StartProcess(t, "podsyncd", filepath.Join(bins, "podsyncd"),
		append(common("podsyncd"), append(node.ConnectedArgs(cfg)[components.PodSyncd], "--image-endpoint=unix://"+imageSocket)...)...)
	// awaitWarnings waits for n warnings naming ep; podsyncd must not exit.
	awaitWarnings := func(n int, ep string) {
		t.Helper()
		testenv.Eventually(t, fmt.Sprintf("podsyncd warning %d times that %s does not answer", n, ep), 2*time.Minute, func() error {
			select {
			case <-podsyncd.Exited:
				t.Fatalf("podsyncd exited waiting for %s:\n%s", ep, podsyncd.Out.String())
			default:
			}
			warnings := 0
			for _, line := range strings.Split(podsyncd.Out.String(), "\n") {
				if strings.Contains(line, notAnswering) && strings.Contains(line, "endpoint="+ep+" ") {
					warnings++
				}
			}
			if warnings < n {
				return fmt.Errorf("%d warnings naming %s", warnings, ep)
			}
			return nil
		})
	}

	// No runtime: podsyncd warns with the endpoint, again and again, and
	// stays up without serving.
	awaitWarnings(3, endpoint)
	psConn, err := grpcclient.Dial(components.Endpoint(runDir, components.PodSyncd))
	if err != nil {
		t.Fatal(err)
	}
	defer psConn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	testenv.Eventually(t, "podsyncd answering health NOT_SERVING", time.Minute, func() error {
		st, err := grpcclient.Check(ctx, psConn, "")
		if err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING {
			return fmt.Errorf("health %v, err %v", st, err)
		}
		return nil
	})

	// runtime-shim starts on that socket: podsyncd now waits for the image
	// endpoint; once it appears, podsyncd connects and runs the pod.
	rt := shim.StartAt(t, strings.TrimPrefix(endpoint, "unix://"), instance)
	awaitWarnings(3, "unix://"+imageSocket)
	if err := os.Symlink(rt.Socket, imageSocket); err != nil {
		t.Fatal(err)
	}
	sdConn, err := grpcclient.Dial(components.Endpoint(runDir, components.Statusd))
	if err != nil {
		t.Fatal(err)
	}
	defer sdConn.Close()
	statuses := statusdv1.NewStatusServiceClient(sdConn)
	var uid string
	testenv.Eventually(t, "the static pod Running and Ready in statusd", 3*time.Minute, func() error {
		resp, err := statuses.ListPodStatuses(ctx, &statusdv1.ListPodStatusesRequest{})
		if err != nil {
			return err
		}
		for _, e := range resp.Entries {
			if e.Name != "late-runtime-"+nodeName {
				continue
			}
			st := &corev1.PodStatus{}
			if err := st.Unmarshal(e.Status); err != nil {
				return err
			}
			if st.Phase != corev1.PodRunning || len(st.ContainerStatuses) != 1 || !st.ContainerStatuses[0].Ready {
				return fmt.Errorf("phase %s, containers %+v", st.Phase, st.ContainerStatuses)
			}
			uid = e.PodUid
			return nil
		}
		return fmt.Errorf("no status of late-runtime-%s among %d", nodeName, len(resp.Entries))
	})
	running, err := rt.Runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid},
	})
	if err != nil || len(running) != 1 {
		t.Fatalf("runtime-shim runs %d containers of the pod (err %v), want 1", len(running), err)
	}
	if st, err := grpcclient.Check(ctx, psConn, ""); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("podsyncd health %v, err %v; want SERVING", st, err)
	}
	select {
	case <-podsyncd.Exited:
		t.Fatal("podsyncd exited")
	default:
	}
}
