package stream

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
	"github.com/microlet/microlet/services/podconfig/internal/merge"
)

// Defaults for the ring and the per-watcher queue.
const (
	DefaultRingSize  = 4096
	DefaultQueueSize = 1024
)

// Event is one message of the stream.
type Event struct {
	// Sequence of the last update the event includes.
	Sequence uint64
	// Resync marks a full snapshot that replaces what the client knew.
	Resync bool
	// Updates in order, pods already in their protobuf encoding.
	Updates []*podconfigv1.PodUpdate
}

// Hooks let the owner count what happens; any may be nil.
type Hooks struct {
	// Update is called for every published update.
	Update func(op merge.Op, source string, pods int)
	// Resync is called for every snapshot sent because a watcher fell behind
	// or resumed from too far back.
	Resync func(reason string)
	// Refused is called for a pod the merge refused.
	Refused func(r merge.Refusal)
	// Watchers is called with the number of open watchers when it changes.
	Watchers func(n int)
}

// Stream publishes merged updates to watchers.
type Stream struct {
	storage   *merge.Storage
	ringSize  int
	queueSize int
	hooks     Hooks

	mu       sync.Mutex
	seq      uint64
	ring     []Event // ring[(i) % ringSize], oldest at head
	head, n  int
	watchers map[*Watcher]struct{}
}

// Option configures a Stream.
type Option func(*Stream)

// WithRingSize sets how many events are kept for resuming watchers.
func WithRingSize(n int) Option { return func(s *Stream) { s.ringSize = max(n, 1) } }

// WithQueueSize sets how many events a watcher may fall behind before it is
// resynced.
func WithQueueSize(n int) Option { return func(s *Stream) { s.queueSize = max(n, 1) } }

// WithHooks sets the counting hooks.
func WithHooks(h Hooks) Option { return func(s *Stream) { s.hooks = h } }

// WithStartSequence sets the first sequence (tests); the default is the
// current time in microseconds.
func WithStartSequence(seq uint64) Option { return func(s *Stream) { s.seq = seq } }

// New returns a stream over storage.
func New(storage *merge.Storage, opts ...Option) *Stream {
	s := &Stream{
		storage:   storage,
		ringSize:  DefaultRingSize,
		queueSize: DefaultQueueSize,
		seq:       uint64(time.Now().UnixMicro()),
		watchers:  map[*Watcher]struct{}{},
	}
	for _, o := range opts {
		o(s)
	}
	s.ring = make([]Event, s.ringSize)
	return s
}

// Apply merges the full set of one source and publishes the resulting
// updates, each under its own sequence number. It never waits for a watcher.
// Calls are serialised, which gives every watcher the same total order.
func (s *Stream) Apply(source string, pods []*corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ups, refused := s.storage.Merge(source, pods)
	if s.hooks.Refused != nil {
		for _, r := range refused {
			s.hooks.Refused(r)
		}
	}
	for _, u := range ups {
		s.seq++
		ev := Event{Sequence: s.seq, Updates: []*podconfigv1.PodUpdate{Encode(u)}}
		s.push(ev)
		if s.hooks.Update != nil {
			s.hooks.Update(u.Op, u.Source, len(u.Pods))
		}
		for w := range s.watchers {
			w.offer(ev)
		}
	}
}

func (s *Stream) push(ev Event) {
	if s.n < s.ringSize {
		s.ring[(s.head+s.n)%s.ringSize] = ev
		s.n++
		return
	}
	s.ring[s.head] = ev
	s.head = (s.head + 1) % s.ringSize
}

// Sequence is the number of the last published update.
func (s *Stream) Sequence() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// snapshotLocked builds a resync event; s.mu must be held so it matches s.seq.
func (s *Stream) snapshotLocked() Event {
	snap := s.storage.Snapshot()
	ups := make([]*podconfigv1.PodUpdate, 0, len(snap))
	for _, u := range snap {
		ups = append(ups, Encode(u))
	}
	return Event{Sequence: s.seq, Resync: true, Updates: ups}
}

// Watch opens a watcher. resumeAfter 0 asks for a snapshot; otherwise the
// watcher gets the updates after resumeAfter if the ring still has them all,
// and a snapshot if not.
func (s *Stream) Watch(resumeAfter uint64) *Watcher {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &Watcher{s: s, ch: make(chan Event, s.queueSize), kick: make(chan struct{}, 1)}
	oldest := s.seq - uint64(s.n) // the ring holds oldest+1 .. seq
	switch {
	case resumeAfter == 0:
		w.ch <- s.snapshotLocked()
	case resumeAfter > s.seq || resumeAfter < oldest || s.seq-resumeAfter > uint64(s.queueSize):
		w.ch <- s.snapshotLocked()
		s.resync("resume too old")
	default:
		for i := 0; i < s.n; i++ {
			ev := s.ring[(s.head+i)%s.ringSize]
			if ev.Sequence > resumeAfter {
				w.ch <- ev
			}
		}
	}
	s.watchers[w] = struct{}{}
	if s.hooks.Watchers != nil {
		s.hooks.Watchers(len(s.watchers))
	}
	return w
}

func (s *Stream) resync(reason string) {
	if s.hooks.Resync != nil {
		s.hooks.Resync(reason)
	}
}

// Watcher is one subscriber.
type Watcher struct {
	s    *Stream
	ch   chan Event
	kick chan struct{}
	// lost is set, under s.mu, when the queue overflowed; the queue then
	// holds a stale prefix and the next read is a snapshot.
	lost bool
}

// offer queues ev without waiting; s.mu is held.
func (w *Watcher) offer(ev Event) {
	if w.lost {
		return
	}
	select {
	case w.ch <- ev:
	default:
		w.lost = true
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// Next returns the next event, waiting until there is one or ctx ends.
func (w *Watcher) Next(ctx context.Context) (Event, error) {
	if ev, ok := w.resyncIfLost(); ok {
		return ev, nil
	}
	select {
	case <-ctx.Done():
		return Event{}, ctx.Err()
	case ev := <-w.ch:
		return ev, nil
	case <-w.kick:
		if ev, ok := w.resyncIfLost(); ok {
			return ev, nil
		}
		return w.Next(ctx)
	}
}

func (w *Watcher) resyncIfLost() (Event, bool) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if !w.lost {
		return Event{}, false
	}
	for {
		select {
		case <-w.ch:
			continue
		default:
		}
		break
	}
	w.lost = false
	w.s.resync("watcher fell behind")
	return w.s.snapshotLocked(), true
}

// Close unsubscribes the watcher.
func (w *Watcher) Close() {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if _, ok := w.s.watchers[w]; !ok {
		return
	}
	delete(w.s.watchers, w)
	if w.s.hooks.Watchers != nil {
		w.s.hooks.Watchers(len(w.s.watchers))
	}
}

// Encode turns a merge update into its wire form.
func Encode(u merge.Update) *podconfigv1.PodUpdate {
	out := &podconfigv1.PodUpdate{Op: OpToProto(u.Op), Source: u.Source, Pods: make([][]byte, 0, len(u.Pods))}
	for _, p := range u.Pods {
		b, err := p.Marshal()
		if err != nil {
			// A Pod the API's own types hold always marshals; a failure here
			// is a programming error worth crashing on.
			panic(err)
		}
		out.Pods = append(out.Pods, b)
	}
	return out
}

// OpToProto maps a merge operation to the wire enum.
func OpToProto(op merge.Op) podconfigv1.Operation {
	switch op {
	case merge.OpAdd:
		return podconfigv1.Operation_OPERATION_ADD
	case merge.OpUpdate:
		return podconfigv1.Operation_OPERATION_UPDATE
	case merge.OpDelete:
		return podconfigv1.Operation_OPERATION_DELETE
	case merge.OpRemove:
		return podconfigv1.Operation_OPERATION_REMOVE
	case merge.OpReconcile:
		return podconfigv1.Operation_OPERATION_RECONCILE
	case merge.OpSet:
		return podconfigv1.Operation_OPERATION_SET
	}
	return podconfigv1.Operation_OPERATION_UNSPECIFIED
}

// List returns the current pods with the sequence of the last update they
// include, taken together.
func (s *Stream) List() ([]merge.PodInfo, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.storage.List(), s.seq
}
