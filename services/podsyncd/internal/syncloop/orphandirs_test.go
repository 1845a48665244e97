package syncloop

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
	"github.com/microlet/microlet/services/podsyncd/internal/volumes"
)

// podDirWithVolume makes the dir of pod uid under root with a file in a
// volume, as a sync that set the pod up would have left it.
func podDirWithVolume(t *testing.T, vm *volumes.Manager, uid types.UID) string {
	t.Helper()
	dir := filepath.Join(vm.PodDir(uid), "volumes", "kubernetes.io~configmap", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "greeting"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	return vm.PodDir(uid)
}

// TestOrphanedPodDirsRemoved: housekeeping removes the dir of a pod that no
// source wants and the runtime does not hold (what a podsyncd killed
// between removing a pod's containers and its dir leaves behind), keeps
// the dirs of wanted pods and of pods the runtime still holds, and keeps
// everything while the runtime cannot be listed.
func TestOrphanedPodDirsRemoved(t *testing.T) {
	var out logLines
	log := out.logger()
	rt := &flakyRuntime{}
	vm := volumes.New(t.TempDir(), nil, nil)
	rm := podruntime.NewManager(rt, rt, podruntime.Options{LogRoot: t.TempDir(), Log: log, Volumes: vm})
	l := New(log, rm, rt, nil, &flakyStatusd{}, nil, Options{Registerer: prometheus.NewRegistry()})
	ctx := context.Background()

	gone := podDirWithVolume(t, vm, "u-gone")
	wanted := podDirWithVolume(t, vm, "u-wanted")
	running := podDirWithVolume(t, vm, "u-running")
	if err := l.removeOrphanedPodDirs([]types.UID{"u-gone", "u-wanted", "u-running"},
		map[types.UID]bool{"u-wanted": true}, map[types.UID]bool{"u-running": true}); err != nil {
		t.Fatal(err)
	}
	for dir, keep := range map[string]bool{gone: false, wanted: true, running: true} {
		if _, err := os.Stat(dir); (err == nil) != keep {
			t.Errorf("%s: stat err %v, want kept=%v", dir, err, keep)
		}
	}

	// Through a housekeeping pass: no pod is wanted here (the store is
	// empty), so every dir goes once the runtime can be listed.
	rt.set(true)
	l.cleanup(ctx)
	for _, dir := range []string{wanted, running} {
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("%s removed while the runtime could not be listed: %v", dir, err)
		}
	}
	rt.set(false)
	l.cleanup(ctx)
	left, err := vm.PodUIDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("pod dirs left after housekeeping: %v", left)
	}
}
