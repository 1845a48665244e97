package containergc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/shim"
	"github.com/microlet/microlet/services/podsyncd/internal/containergc"
	"github.com/microlet/microlet/services/podsyncd/internal/containerlogs"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBuilt()
	os.Exit(code)
}

// node is a pod-ish layout on runtime-shim: sandboxes and containers
// labelled as podsyncd labels them, logs under a pod log root, symlinks.
type node struct {
	t        *testing.T
	ctx      context.Context
	rt       runtimeapi.RuntimeServiceClient
	image    string
	logs     string
	symlinks string
}

func (n *node) sandbox(name string, uid types.UID, attempt uint32) (id, logDir string) {
	n.t.Helper()
	logDir = filepath.Join(n.logs, fmt.Sprintf("default_%s_%s", name, uid))
	resp, err := n.rt.RunPodSandbox(n.ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: string(uid), Attempt: attempt},
		LogDirectory: logDir, Linux: &runtimeapi.LinuxPodSandboxConfig{},
		Labels: map[string]string{"io.kubernetes.pod.uid": string(uid), "io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "default"},
	}})
	if err != nil {
		n.t.Fatal(err)
	}
	return resp.PodSandboxId, logDir
}

// container runs one instance of a container to completion (or leaves it
// running with sleep) and links its log as podsyncd does.
func (n *node) container(sb, logDir, pod string, uid types.UID, name string, attempt uint32, run string) string {
	n.t.Helper()
	logPath := fmt.Sprintf("%s/%d.log", name, attempt)
	resp, err := n.rt.CreateContainer(n.ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name, Attempt: attempt},
		Image:    &runtimeapi.ImageSpec{Image: n.image}, Command: []string{"sh", "-c", run}, LogPath: logPath,
		Labels: map[string]string{"io.kubernetes.pod.uid": string(uid), "io.kubernetes.pod.name": pod,
			"io.kubernetes.pod.namespace": "default", "io.kubernetes.container.name": name},
	}, SandboxConfig: &runtimeapi.PodSandboxConfig{LogDirectory: logDir}})
	if err != nil {
		n.t.Fatal(err)
	}
	id := resp.ContainerId
	if _, err := n.rt.StartContainer(n.ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		n.t.Fatal(err)
	}
	want := runtimeapi.ContainerState_CONTAINER_EXITED
	if run == "sleep 3600" {
		want = runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	testenv.Eventually(n.t, "container "+name+" in its state", time.Minute, func() error {
		st, err := n.rt.ContainerStatus(n.ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return err
		}
		if st.Status.State != want {
			return fmt.Errorf("state %s", st.Status.State)
		}
		return nil
	})
	if err := containerlogs.Link(n.symlinks, pod, "default", name, id, filepath.Join(logDir, logPath)); err != nil {
		n.t.Fatal(err)
	}
	return id
}

func (n *node) exists(id string) bool {
	_, err := n.rt.ContainerStatus(n.ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	return err == nil
}

func (n *node) sandboxExists(id string) bool {
	resp, err := n.rt.ListPodSandbox(n.ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: id}})
	if err != nil {
		n.t.Fatal(err)
	}
	return len(resp.Items) > 0
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return !errors.Is(err, os.ErrNotExist)
}

// TestContainerGCOnDocker runs the collector against runtime-shim on the
// real Docker Engine: a pod that exists keeps exactly
// maximum_dead_containers_per_container dead instances of each container
// (2, then 1), with their log files and symlinks, and its running
// container; its old empty sandbox goes, its current one stays. A pod that
// is gone loses every container, its stopped sandbox and its log dir; an
// earlier run's leftover log dir goes too.
func TestContainerGCOnDocker(t *testing.T) {
	s := shim.Start(t, "containergc")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cc, err := grpcclient.Dial("unix://" + s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	n := &node{t: t, ctx: ctx, rt: runtimeapi.NewRuntimeServiceClient(cc), image: s.Busybox,
		logs: filepath.Join(s.Dir, "pods"), symlinks: filepath.Join(s.Dir, "containers")}

	a, g := types.UID("a-"+rand.String(6)), types.UID("g-"+rand.String(6))
	oldSB, _ := n.sandbox("web", a, 0)
	if _, err := n.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: oldSB}); err != nil {
		t.Fatal(err)
	}
	sbA, logA := n.sandbox("web", a, 1)
	var app []string
	for i := range uint32(4) {
		app = append(app, n.container(sbA, logA, "web", a, "app", i, fmt.Sprintf("echo attempt %d", i)))
	}
	side := n.container(sbA, logA, "web", a, "side", 0, "sleep 3600")
	sbG, logG := n.sandbox("gone", g, 0)
	var gone []string
	for i := range uint32(2) {
		gone = append(gone, n.container(sbG, logG, "gone", g, "app", i, "true"))
	}
	if _, err := n.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sbG}); err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(n.logs, "default_old_leftover-"+rand.String(6))
	if err := os.MkdirAll(filepath.Join(leftover, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := func(pod, name, id string) string {
		return containerlogs.SymlinkPath(n.symlinks, pod, "default", name, id)
	}
	opts := containergc.Options{PodLogsDir: n.logs, SymlinkDir: n.symlinks, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	// Before every source is seen nothing is gone; two dead instances each.
	gc := containergc.New(s.Runtime, containergc.Policy{MaxPerPodContainer: 2, MaxContainers: -1}, opts)
	res, err := gc.GarbageCollect(ctx, func(types.UID) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	if res.Containers != 2 || res.Sandboxes != 1 || res.LogDirs != 0 {
		t.Errorf("first pass removed %+v, want 2 containers (app 0 and 1) and A's old sandbox", res)
	}
	for i, id := range app {
		if kept := i >= 2; n.exists(id) != kept {
			t.Errorf("app attempt %d exists: %v, want %v", i, !kept, kept)
		}
		if kept := i >= 2; fileExists(filepath.Join(logA, "app", fmt.Sprintf("%d.log", i))) != kept || fileExists(link("web", "app", id)) != kept {
			t.Errorf("app attempt %d log file or symlink: want present %v", i, kept)
		}
	}
	if !n.exists(gone[0]) || !n.exists(gone[1]) || !n.sandboxExists(sbG) {
		t.Error("a pod not known to be gone lost containers or its sandbox")
	}
	if n.sandboxExists(oldSB) || !n.sandboxExists(sbA) {
		t.Error("want A's old empty sandbox removed and its current one kept")
	}

	// The kubelet's defaults with G gone (and every unknown pod).
	gc = containergc.New(s.Runtime, containergc.DefaultPolicy(), opts)
	res, err = gc.GarbageCollect(ctx, func(uid types.UID) bool { return uid != a })
	if err != nil {
		t.Fatal(err)
	}
	if res.Containers != 3 || res.Sandboxes != 1 || res.LogDirs != 2 {
		t.Errorf("second pass removed %+v, want 3 containers (app 2, both of G), G's sandbox, 2 log dirs (G's and the leftover)", res)
	}
	live := []string{app[3], side}
	for _, id := range append(slices.Clone(app), append(gone, side)...) {
		if want := slices.Contains(live, id); n.exists(id) != want {
			t.Errorf("container %s exists: %v, want %v", id, !want, want)
		}
	}
	if !fileExists(filepath.Join(logA, "app", "3.log")) || !fileExists(link("web", "app", app[3])) {
		t.Error("the newest app instance lost its log or symlink")
	}
	if n.sandboxExists(sbG) || !n.sandboxExists(sbA) {
		t.Error("want G's sandbox removed and A's kept")
	}
	if fileExists(logG) || fileExists(leftover) || !fileExists(logA) {
		t.Errorf("log dirs: G's %v, leftover %v, A's %v; want only A's", fileExists(logG), fileExists(leftover), fileExists(logA))
	}
	for _, id := range gone {
		if fileExists(link("gone", "app", id)) {
			t.Errorf("symlink of removed container %s left", id)
		}
	}
}
