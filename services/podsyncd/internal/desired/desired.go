package desired

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
)

// MirrorAnnotation marks a mirror pod: the API copy of a static pod, never run.
const MirrorAnnotation = "kubernetes.io/config.mirror"

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
	source map[types.UID]string
	seq    uint64
	synced bool
}

// New returns a store following client.
func New(client podconfigv1.PodConfigServiceClient, h Handler, log *slog.Logger) *Store {
	return &Store{client: client, h: h, log: log, pods: map[types.UID]*corev1.Pod{}, source: map[types.UID]string{}}
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

// Run follows the stream until ctx ends, reconnecting with backoff.
func (s *Store) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.watchOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("podconfig watch ended; resuming", "err", err, "after", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < 5*time.Second {
			backoff *= 2
		}
	}
}

func (s *Store) watchOnce(ctx context.Context) error {
	s.mu.Lock()
	from := s.seq
	s.mu.Unlock()
	stream, err := s.client.Watch(ctx, &podconfigv1.WatchRequest{ResumeAfter: from})
	if err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if err := s.apply(resp); err != nil {
			return err
		}
	}
}

func decode(raw [][]byte) ([]*corev1.Pod, error) {
	out := make([]*corev1.Pod, 0, len(raw))
	for _, b := range raw {
		p := &corev1.Pod{}
		if err := p.Unmarshal(b); err != nil {
			return nil, fmt.Errorf("decode pod: %w", err)
		}
		if p.Annotations[MirrorAnnotation] != "" {
			continue // mirror pods describe static pods; they are not run
		}
		out = append(out, p)
	}
	return out, nil
}

func (s *Store) apply(resp *podconfigv1.WatchResponse) error {
	if resp.Resync {
		seen := map[types.UID]bool{}
		for _, u := range resp.Updates {
			pods, err := decode(u.Pods)
			if err != nil {
				return err
			}
			for _, p := range pods {
				seen[p.UID] = true
				s.upsert(p, u.Source)
			}
		}
		s.mu.Lock()
		var gone []*corev1.Pod
		for uid, p := range s.pods {
			if !seen[uid] {
				gone = append(gone, p)
				delete(s.pods, uid)
				delete(s.source, uid)
			}
		}
		s.seq = resp.Sequence
		s.synced = true
		s.mu.Unlock()
		for _, p := range gone {
			s.h.Remove(p)
		}
		return nil
	}
	for _, u := range resp.Updates {
		pods, err := decode(u.Pods)
		if err != nil {
			return err
		}
		for _, p := range pods {
			switch u.Op {
			case podconfigv1.Operation_OPERATION_REMOVE:
				s.mu.Lock()
				delete(s.pods, p.UID)
				delete(s.source, p.UID)
				s.mu.Unlock()
				s.h.Remove(p)
			case podconfigv1.Operation_OPERATION_SET:
				s.upsert(p, u.Source)
			default:
				s.mu.Lock()
				s.pods[p.UID] = p
				s.source[p.UID] = u.Source
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
	s.mu.Lock()
	s.seq = resp.Sequence
	s.mu.Unlock()
	return nil
}

// upsert applies one pod of a snapshot as ADD or UPDATE (or DELETE when a
// deletion timestamp is new), doing nothing when it is unchanged.
func (s *Store) upsert(p *corev1.Pod, source string) {
	s.mu.Lock()
	old := s.pods[p.UID]
	s.pods[p.UID] = p
	s.source[p.UID] = source
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
