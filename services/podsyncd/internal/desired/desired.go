package desired

import (
	"context"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/internal/podsource"
	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
	podconfigclient "github.com/microlet/microlet/services/podconfig/client"
)

// Handler receives the desired-pod changes, one call per pod.
type Handler interface {
	Add(pod *corev1.Pod)
	Update(pod *corev1.Pod)
	Delete(pod *corev1.Pod)
	Remove(pod *corev1.Pod)
	Reconcile(pod *corev1.Pod)
}

// Store is the local view of the desired pods.
type Store struct {
	client podconfigv1.PodConfigServiceClient
	h      Handler
	log    *slog.Logger

	mu     sync.Mutex
	pods   map[types.UID]*corev1.Pod
	synced bool
}

// New returns a store following client.
func New(client podconfigv1.PodConfigServiceClient, h Handler, log *slog.Logger) *Store {
	return &Store{client: client, h: h, log: log, pods: map[types.UID]*corev1.Pod{}}
}

// Pods returns the desired pods.
func (s *Store) Pods() []*corev1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(s.pods))
	for _, p := range s.pods {
		out = append(out, p)
	}
	return out
}

// Get returns one desired pod.
func (s *Store) Get(uid types.UID) *corev1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pods[uid]
}

// Synced reports whether the first snapshot arrived.
func (s *Store) Synced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced
}

// Run follows the stream until ctx ends, reconnecting with backoff and
// resuming after the last update applied.
func (s *Store) Run(ctx context.Context) {
	w := &podconfigclient.Watcher{Client: s.client, Handle: s.apply, Log: s.log}
	w.Run(ctx)
}

// runnable drops mirror pods: they describe static pods and are not run.
func runnable(pods []*corev1.Pod) []*corev1.Pod {
	out := pods[:0:0]
	for _, p := range pods {
		if !podsource.IsMirror(p) {
			out = append(out, p)
		}
	}
	return out
}

func (s *Store) apply(ev podconfigclient.Event) {
	if ev.Resync {
		seen := map[types.UID]bool{}
		for _, u := range ev.Updates {
			for _, p := range runnable(u.Pods) {
				seen[p.UID] = true
				s.upsert(p)
			}
		}
		s.mu.Lock()
		var gone []*corev1.Pod
		for uid, p := range s.pods {
			if !seen[uid] {
				gone = append(gone, p)
				delete(s.pods, uid)
			}
		}
		s.synced = true
		s.mu.Unlock()
		for _, p := range gone {
			s.h.Remove(p)
		}
		return
	}
	for _, u := range ev.Updates {
		for _, p := range runnable(u.Pods) {
			switch u.Op {
			case podconfigv1.Operation_OPERATION_REMOVE:
				s.mu.Lock()
				delete(s.pods, p.UID)
				s.mu.Unlock()
				s.h.Remove(p)
			case podconfigv1.Operation_OPERATION_SET:
				s.upsert(p)
			default:
				s.mu.Lock()
				s.pods[p.UID] = p
				s.mu.Unlock()
				switch u.Op {
				case podconfigv1.Operation_OPERATION_ADD:
					s.h.Add(p)
				case podconfigv1.Operation_OPERATION_UPDATE:
					s.h.Update(p)
				case podconfigv1.Operation_OPERATION_DELETE:
					s.h.Delete(p)
				case podconfigv1.Operation_OPERATION_RECONCILE:
					s.h.Reconcile(p)
				}
			}
		}
	}
}

// upsert applies one pod of a snapshot as ADD or UPDATE (or DELETE when a
// deletion timestamp is new), doing nothing when it is unchanged.
func (s *Store) upsert(p *corev1.Pod) {
	s.mu.Lock()
	old := s.pods[p.UID]
	s.pods[p.UID] = p
	s.mu.Unlock()
	switch {
	case old == nil:
		s.h.Add(p)
	case p.DeletionTimestamp != nil && old.DeletionTimestamp == nil:
		s.h.Delete(p)
	case !equality.Semantic.DeepEqual(old.Spec, p.Spec) || !equality.Semantic.DeepEqual(old.Labels, p.Labels):
		s.h.Update(p)
	}
}
