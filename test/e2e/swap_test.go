package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	componenttable "github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/node"
	cloudsyncv1 "github.com/microlet/microlet/proto/microlet/cloudsync/v1"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
	supervisorv1 "github.com/microlet/microlet/proto/microlet/supervisor/v1"
)

// binaries builds microlet, every service, runtime-shim's pause program (next
// to runtime-shim, where it looks for it) and the example cloud provider
// plug-in, once per run, with plain flags so other tests' build cache serves.
func binaries(t *testing.T) string {
	t.Helper()
	pkgs := []string{"github.com/microlet/microlet/cmd/microlet",
		"github.com/microlet/microlet/services/runtime-shim/pause",
		"github.com/microlet/microlet/examples/cloudprovider-external"}
	for _, c := range componenttable.All {
		pkgs = append(pkgs, "github.com/microlet/microlet/services/"+c.Name)
	}
	return testenv.Build(t, nil, pkgs...)
}

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBuilt()
	os.Exit(code)
}

// eventually polls f until it returns nil, for up to 2*time.Minute.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	testenv.Eventually(t, what, 2*time.Minute, f)
}

func dial(t *testing.T, path string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpcclient.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// callTimeout bounds one RPC; eventually retries.
const callTimeout = 20 * time.Second

// components returns the supervisor's view, by name.
func components(sup *grpc.ClientConn) (map[string]*supervisorv1.Component, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return node.Components(ctx, supervisorv1.NewSupervisorServiceClient(sup))
}

// runningContainer reports whether the runtime behind cri runs a container of
// the pod named podName.
func runningContainer(cri *grpc.ClientConn, podName string) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := runtimeapi.NewRuntimeServiceClient(cri).ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{
			State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
			LabelSelector: map[string]string{"io.kubernetes.pod.name": podName},
		},
	})
	if err != nil {
		return err
	}
	if len(resp.GetContainers()) == 0 {
		return fmt.Errorf("no running container of pod %s", podName)
	}
	return nil
}

func staticPod(t *testing.T, dir, name string) {
	t.Helper()
	m := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n  containers:\n  - name: c\n    image: microlet.local/pause:1.0\n    imagePullPolicy: Never\n", name)
	if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
}

func nodeAddresses(cc *grpc.ClientConn) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := cloudsyncv1.NewCloudSyncServiceClient(cc).GetNodeAddresses(ctx, &cloudsyncv1.GetNodeAddressesRequest{})
	if err != nil {
		return "", err
	}
	var out []string
	for _, b := range resp.GetAddresses() {
		var a corev1.NodeAddress
		if err := a.Unmarshal(b); err != nil {
			return "", err
		}
		out = append(out, a.Address)
	}
	return strings.Join(out, ","), nil
}

// TestComponentSwaps runs `microlet run` and swaps components under it, one at
// a time, while the others keep running:
//
//  1. The CRI runtime is not the supervisor's runtime-shim but an external
//     endpoint: a forwarding runtime-shim in front of a Docker-backed one.
//     The supervisor starts no runtime-shim, hands the endpoint to the
//     services, and a static pod runs through it.
//  2. podconfig is SIGKILLed and a static pod is added while it is down: the
//     supervisor restarts it, podsyncd's watch reconnects on its own (no
//     restart) and the new pod runs: no update is lost.
//  3. statusd is SIGKILLed: after its restart it still has the first pod's
//     status (durable store), and podsyncd did not restart.
//  4. The forwarding runtime is replaced by a new process on the same socket
//     (a new build): podsyncd and nodestatusd reconnect without restarting
//     and a third pod runs.
//  5. cloudsyncd's external provider plug-in is replaced by another process
//     on the same socket answering other addresses: cloudsyncd follows it
//     without restarting.
func TestComponentSwaps(t *testing.T) {
	if out, err := exec.Command("docker", "info", "-f", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		testenv.RequireOrSkip(t, "no Docker engine: %v %s", err, out)
	}
	bin := binaries(t)
	rb := make([]byte, 4)
	_, _ = rand.Read(rb)
	suffix := hex.EncodeToString(rb)
	node := "e2e-" + suffix
	instance := "e2e-swap-" + suffix
	t.Cleanup(func() {
		// Whatever the backend left in Docker, by its instance label.
		out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=io.microlet.instance="+instance).Output()
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			_ = exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).Run()
		}
	})

	dir, err := os.MkdirTemp("/tmp", "mle2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	runDir, extDir, manifests := filepath.Join(dir, "run"), filepath.Join(dir, "ext"), filepath.Join(dir, "manifests")
	for _, d := range []string{runDir, extDir, manifests} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	backendSock, criSock, cloudSock := filepath.Join(extDir, "backend.sock"), filepath.Join(extDir, "cri.sock"), filepath.Join(extDir, "cloud.sock")

	// The external runtime: Docker-backed shim, and a forwarder in front.
	testenv.StartProcess(t, "backend runtime-shim", filepath.Join(bin, "runtime-shim"), "--socket", backendSock, "--run-dir", extDir,
		"--data-dir", filepath.Join(dir, "backend"), "--node-name", node, "--docker-instance", instance)
	forwarderArgs := []string{"--backend", "forward", "--forward-endpoint", "unix://" + backendSock, "--socket", criSock,
		"--run-dir", extDir, "--data-dir", filepath.Join(dir, "forwarder"), "--node-name", node}
	forwarder := testenv.StartProcess(t, "forwarding runtime-shim", filepath.Join(bin, "runtime-shim"), forwarderArgs...)

	// The external cloud provider plug-in, first answering 10.0.0.1.
	writeCloud := func(name, addr string) string {
		p := filepath.Join(dir, name+".yaml")
		y := fmt.Sprintf("name: %s\nnodes:\n  %s:\n    provider_id: example://%s\n    addresses:\n    - {type: InternalIP, address: %s}\n", name, node, node, addr)
		if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pluginA := testenv.StartProcess(t, "cloud plug-in A", filepath.Join(bin, "cloudprovider-external"), "--socket", cloudSock, "--config", writeCloud("a", "10.0.0.1"))

	cfg := filepath.Join(dir, "microlet.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(
		"args:\n  cloudsyncd: [--cloud-provider=external, --external-endpoint=unix://%s, --sync-frequency=1s]\n", cloudSock)), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.StartProcess(t, "microlet run", filepath.Join(bin, "microlet"), "run", "--config", cfg, "--run-dir", runDir,
		"--data-dir", filepath.Join(dir, "data"), "--bin-dir", bin, "--manifest-dir", manifests, "--node-name", node,
		"--runtime-endpoint", "unix://"+criSock, "--kubelet-port=0")

	sup := dial(t, filepath.Join(runDir, "microlet.sock"))
	eventually(t, "every component SERVING", func() error {
		m, err := components(sup)
		if err != nil {
			return err
		}
		for name, c := range m {
			if c.GetHealth() != supervisorv1.Health_HEALTH_SERVING {
				return fmt.Errorf("%s is %s", name, c.GetHealth())
			}
		}
		if len(m) < 6 {
			return fmt.Errorf("only %d components listed", len(m))
		}
		return nil
	})

	// 1. The runtime is the external one.
	m, err := components(sup)
	if err != nil {
		t.Fatal(err)
	}
	if rt := m["runtime-shim"]; !rt.GetExternal() || rt.GetPid() != 0 || rt.GetEndpoint() != "unix://"+criSock {
		t.Fatalf("runtime-shim component %v: want external at unix://%s with no process", rt, criSock)
	}
	if _, err := os.Stat(filepath.Join(runDir, "runtime.sock")); err == nil {
		t.Fatal("the supervisor started its own runtime-shim")
	}
	for _, name := range []string{"nodestatusd", "podsyncd"} {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", m[name].GetPid()))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(cmdline, []byte("--runtime-endpoint=unix://"+criSock)) {
			t.Fatalf("%s was not handed the external runtime: %q", name, cmdline)
		}
	}
	backend := dial(t, backendSock)
	staticPod(t, manifests, "swap-a")
	eventually(t, "pod swap-a running through the forwarder", func() error { return runningContainer(backend, "swap-a-"+node) })
	t.Log("1: static pod runs through the external (forwarding) runtime")

	restarts := func(name string) int32 {
		m, err := components(sup)
		if err != nil {
			t.Fatal(err)
		}
		return m[name].GetRestarts()
	}

	// 2. podconfig killed; an update made while it is down still arrives.
	if err := syscall.Kill(int(m["podconfig"].GetPid()), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	staticPod(t, manifests, "swap-b")
	eventually(t, "pod swap-b running after podconfig's restart", func() error { return runningContainer(backend, "swap-b-"+node) })
	if r := restarts("podconfig"); r < 1 {
		t.Fatalf("podconfig restarts = %d after SIGKILL", r)
	}
	t.Log("2: podconfig restarted; the pod added meanwhile runs")

	// 3. statusd killed; its statuses survive and podsyncd carries on.
	m, _ = components(sup)
	if err := syscall.Kill(int(m["statusd"].GetPid()), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	statusd := dial(t, filepath.Join(runDir, "statusd.sock"))
	eventually(t, "statusd back with swap-a's status", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		resp, err := statusdv1.NewStatusServiceClient(statusd).ListPodStatuses(ctx, &statusdv1.ListPodStatusesRequest{})
		if err != nil {
			return err
		}
		for _, e := range resp.GetEntries() {
			if e.GetName() == "swap-a-"+node {
				return nil
			}
		}
		return fmt.Errorf("no status for swap-a-%s among %d", node, len(resp.GetEntries()))
	})
	t.Log("3: statusd restarted with its statuses")

	// 4. A new forwarding runtime process takes over the same socket.
	forwarder.Kill()
	testenv.StartProcess(t, "forwarding runtime-shim (new)", filepath.Join(bin, "runtime-shim"), forwarderArgs...)
	staticPod(t, manifests, "swap-c")
	eventually(t, "pod swap-c running through the new forwarder", func() error { return runningContainer(backend, "swap-c-"+node) })
	t.Log("4: a new runtime process on the same socket serves the node")

	// 5. The cloud provider plug-in is replaced by one with other answers.
	cloud := dial(t, filepath.Join(runDir, "cloudsyncd.sock"))
	eventually(t, "addresses from plug-in A", func() error {
		a, err := nodeAddresses(cloud)
		if err == nil && a != "10.0.0.1" {
			err = fmt.Errorf("addresses %q", a)
		}
		return err
	})
	pluginA.Kill()
	testenv.StartProcess(t, "cloud plug-in B", filepath.Join(bin, "cloudprovider-external"), "--socket", cloudSock, "--config", writeCloud("b", "10.0.0.2"))
	eventually(t, "addresses from plug-in B", func() error {
		a, err := nodeAddresses(cloud)
		if err == nil && a != "10.0.0.2" {
			err = fmt.Errorf("addresses %q", a)
		}
		return err
	})
	t.Log("5: cloudsyncd follows the replaced provider plug-in")

	// None of the services that were not themselves killed restarted: they
	// reconnected on their own.
	for _, name := range []string{"podsyncd", "nodestatusd", "cloudsyncd"} {
		if r := restarts(name); r != 0 {
			t.Errorf("%s restarted %d times; it should have reconnected on its own", name, r)
		}
	}

	// Remove the pods so their containers are gone before the runtime stops.
	for _, p := range []string{"swap-a", "swap-b", "swap-c"} {
		_ = os.Remove(filepath.Join(manifests, p+".yaml"))
	}
	eventually(t, "the pods' containers stopped", func() error {
		for _, p := range []string{"swap-a", "swap-b", "swap-c"} {
			if runningContainer(backend, p+"-"+node) == nil {
				return fmt.Errorf("%s still runs", p)
			}
		}
		return nil
	})
}
