package server_test

import (
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/podsource"
	"github.com/microlet/microlet/internal/service/servicetest"
	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
)

// fakePodConfig is a minimal PodConfigService on a real unix socket: every
// Watch gets a snapshot of the current updates (resync), then each pushed
// update. Enough to drive the mirror manager the way podconfig does.
type fakePodConfig struct {
	podconfigv1.UnimplementedPodConfigServiceServer
	mu       sync.Mutex
	seq      uint64
	sets     map[string][][]byte // source -> pods (the snapshot)
	watchers []chan *podconfigv1.WatchResponse
}

func (f *fakePodConfig) Watch(_ *podconfigv1.WatchRequest, s podconfigv1.PodConfigService_WatchServer) error {
	f.mu.Lock()
	snap := &podconfigv1.WatchResponse{Sequence: f.seq, Resync: true}
	for src, pods := range f.sets {
		snap.Updates = append(snap.Updates, &podconfigv1.PodUpdate{Op: podconfigv1.Operation_OPERATION_SET, Source: src, Pods: pods})
	}
	ch := make(chan *podconfigv1.WatchResponse, 100)
	f.watchers = append(f.watchers, ch)
	f.mu.Unlock()
	if err := s.Send(snap); err != nil {
		return err
	}
	for {
		select {
		case <-s.Context().Done():
			return nil
		case r := <-ch:
			if err := s.Send(r); err != nil {
				return err
			}
		}
	}
}

// push sends one update and folds it into the snapshot.
func (f *fakePodConfig) push(op podconfigv1.Operation, source string, pods ...*corev1.Pod) {
	var raw [][]byte
	for _, p := range pods {
		b, err := p.Marshal()
		if err != nil {
			panic(err)
		}
		raw = append(raw, b)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	switch op {
	case podconfigv1.Operation_OPERATION_SET:
		f.sets[source] = raw
	case podconfigv1.Operation_OPERATION_REMOVE:
		f.sets[source] = nil
	default:
		f.sets[source] = raw
	}
	r := &podconfigv1.WatchResponse{Sequence: f.seq, Updates: []*podconfigv1.PodUpdate{{Op: op, Source: source, Pods: raw}}}
	for _, w := range f.watchers {
		w <- r
	}
}

func startFakePodConfig(t *testing.T) (*fakePodConfig, podconfigv1.PodConfigServiceClient) {
	t.Helper()
	dir, err := shortTempDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeAll(dir) })
	sock := filepath.Join(dir, "podconfig.sock")
	f := &fakePodConfig{sets: map[string][][]byte{}}
	servicetest.Serve(t, sock, func(s *grpc.Server) { podconfigv1.RegisterPodConfigServiceServer(s, f) })
	cc, err := grpcclient.Dial("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return f, podconfigv1.NewPodConfigServiceClient(cc)
}

// staticPod is what podconfig delivers for a manifest file on this node.
func (e *env) staticPod(hash, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "etcd-" + e.node, Namespace: e.ns, UID: types.UID(hash),
			Annotations: map[string]string{
				podsource.SourceAnnotation:  "file",
				podsource.HashAnnotation:    hash,
				"kubernetes.io/config.seen": "2026-01-01T00:00:00Z",
			},
		},
		Spec: corev1.PodSpec{
			NodeName:      e.node,
			RestartPolicy: corev1.RestartPolicyAlways,
			Containers:    []corev1.Container{{Name: "c", Image: image}},
		},
	}
}

func TestMirrorPodLifecycle(t *testing.T) {
	e := newEnv(t)
	pc, client := startFakePodConfig(t)
	static := e.staticPod("hash1", "busybox")
	pc.push(podconfigv1.Operation_OPERATION_SET, "file", static)
	r := e.startRig(t, client)
	name := static.Name

	var first *corev1.Pod
	eventually(t, "mirror pod created", func() error {
		p, err := getPod(t, e.admin, e.ns, name)
		if err != nil {
			return err
		}
		if p.Annotations[podsource.MirrorAnnotation] != "hash1" {
			return errorf("annotations %v", p.Annotations)
		}
		if len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Kind != "Node" || p.OwnerReferences[0].Name != e.node || p.OwnerReferences[0].UID == "" {
			return errorf("owner references %+v", p.OwnerReferences)
		}
		first = p
		return nil
	})

	// podconfig's API source delivers the mirror pod under the static pod's
	// name; that must not be taken for the static pod going away.
	pc.push(podconfigv1.Operation_OPERATION_SET, "api", first)

	// The static pod's status goes to its mirror pod.
	if _, err := r.cache.SetPodStatus(static, runningStatus(3, true)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "status on the mirror pod", func() error {
		p, err := getPod(t, e.admin, e.ns, name)
		if err != nil {
			return err
		}
		if restarts(p) != 3 || p.Status.Phase != corev1.PodRunning {
			return errorf("mirror status %+v", p.Status)
		}
		return nil
	})

	// Deleted by someone: recreated.
	grace := int64(0)
	if err := e.admin.CoreV1().Pods(e.ns).Delete(testCtx(t), name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "mirror pod recreated", func() error {
		p, err := getPod(t, e.admin, e.ns, name)
		if err != nil {
			return err
		}
		if p.UID == first.UID {
			return errorf("still the old mirror pod")
		}
		return nil
	})
	// The status follows the new mirror pod (reconcile resends it).
	eventually(t, "status on the recreated mirror pod", func() error {
		p, err := getPod(t, e.admin, e.ns, name)
		if err != nil {
			return err
		}
		if restarts(p) != 3 {
			return errorf("restarts %d", restarts(p))
		}
		return nil
	})

	// Deleted gracefully by someone: a pod bound to a node waits for the
	// node to finish the deletion, so the node deletes it and puts a new
	// one in its place.
	second := mirrorPod(t, e, name)
	graceful := int64(30)
	if err := e.admin.CoreV1().Pods(e.ns).Delete(testCtx(t), name, metav1.DeleteOptions{GracePeriodSeconds: &graceful}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "gracefully deleted mirror pod replaced", func() error {
		p, err := getPod(t, e.admin, e.ns, name)
		if err != nil {
			return err
		}
		if p.UID == second.UID || p.DeletionTimestamp != nil {
			return errorf("still the old mirror pod (uid %s, deletion %v)", p.UID, p.DeletionTimestamp)
		}
		return nil
	})
	third := mirrorPod(t, e, name)

	// The manifest changed while the old static pod still runs (its status
	// is cached and not reclaimed): the mirror pod keeps showing the old
	// pod, and the new pod's status does not go to it.
	changed := e.staticPod("hash2", "busybox:2")
	if _, err := r.cache.SetPodStatus(changed, runningStatus(7, true)); err != nil {
		t.Fatal(err)
	}
	pc.push(podconfigv1.Operation_OPERATION_UPDATE, "file", changed)
	reconcileWhenDesired(t, r, name, "hash2")
	if p := mirrorPod(t, e, name); p.UID != third.UID || p.Annotations[podsource.MirrorAnnotation] != "hash1" {
		t.Fatalf("mirror pod of the still running static pod replaced: uid %s (was %s), annotations %v", p.UID, third.UID, p.Annotations)
	}
	if _, err := r.cache.SetPodStatus(static, runningStatus(5, true)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the old pod's status on its mirror pod", func() error {
		p, err := getPod(t, e.admin, e.ns, name)
		if err != nil {
			return err
		}
		if restarts(p) != 5 {
			return errorf("restarts %d", restarts(p))
		}
		return nil
	})

	// The old pod finished: its mirror pod is replaced by the new pod's,
	// which gets the new pod's status.
	if err := r.cache.ReportReclaimed(string(static.UID)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "mirror pod replaced", func() error {
		p, err := getPod(t, e.admin, e.ns, name)
		if err != nil {
			return err
		}
		if p.Annotations[podsource.MirrorAnnotation] != "hash2" || p.Spec.Containers[0].Image != "busybox:2" {
			return errorf("mirror %v %s", p.Annotations, p.Spec.Containers[0].Image)
		}
		if restarts(p) != 7 {
			return errorf("restarts %d, want the new pod's 7", restarts(p))
		}
		return nil
	})
	fourth := mirrorPod(t, e, name)

	// The static pod leaves but still runs (terminating): the mirror pod
	// stays until the node reports it reclaimed, then goes.
	pc.push(podconfigv1.Operation_OPERATION_REMOVE, "file", changed)
	reconcileWhenDesired(t, r, name, "")
	if p := mirrorPod(t, e, name); p.UID != fourth.UID {
		t.Fatalf("mirror pod of the terminating static pod replaced: uid %s (was %s)", p.UID, fourth.UID)
	}
	if err := r.cache.ReportReclaimed(string(changed.UID)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "mirror pod deleted", func() error {
		if _, err := getPod(t, e.admin, e.ns, name); !isNotFound(err) {
			return errorf("still there (err %v)", err)
		}
		return nil
	})
}

// mirrorPod reads the mirror pod name, which must exist.
func mirrorPod(t *testing.T, e *env, name string) *corev1.Pod {
	t.Helper()
	p, err := getPod(t, e.admin, e.ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// reconcileWhenDesired waits until the rig's mirror manager has taken in
// podconfig's change (the static pod name with config hash, or no static
// pod name when hash is empty), then makes one reconciliation pass.
func reconcileWhenDesired(t *testing.T, r *rig, name, hash string) {
	t.Helper()
	eventually(t, "podconfig's change taken in", func() error {
		want, _ := r.mirror.Desired()
		for _, p := range want {
			if p.Name == name {
				if p.Annotations[podsource.HashAnnotation] == hash {
					return nil
				}
				return errorf("static pod %s has hash %s", name, p.Annotations[podsource.HashAnnotation])
			}
		}
		if hash == "" {
			return nil
		}
		return errorf("no static pod %s", name)
	})
	if err := r.mirror.Reconcile(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}
