package podworkers

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
)

// State is a worker's lifecycle stage.
type State int

// Worker states.
const (
	Syncing State = iota
	Terminating
	Terminated
)

func (s State) String() string {
	return [...]string{"syncing", "terminating", "terminated"}[s]
}

// Handler does the work for one pod; the workers call it serially per pod.
type Handler interface {
	// SyncPod makes the pod run; terminal reports that it finished for good.
	SyncPod(ctx context.Context, pod *corev1.Pod) (terminal bool, requeue time.Duration, err error)
	// SyncTerminatingPod stops the pod's containers within grace (nil: the pod's own).
	SyncTerminatingPod(ctx context.Context, pod *corev1.Pod, grace *int64) error
	// SyncTerminatedPod cleans up; remove is set when the pod is gone from the config.
	SyncTerminatedPod(ctx context.Context, pod *corev1.Pod, remove bool) error
}

// Info describes a worker for ListPodWorkers.
type Info struct {
	UID       types.UID
	Namespace string
	Name      string
	State     State
	LastError string
}

type worker struct {
	notify chan struct{}

	mu     sync.Mutex
	pod    *corev1.Pod
	state  State
	kill   bool // terminate now (REMOVE or DELETE)
	remove bool // gone from the config: clean up and exit
	// restart: the pod came back to the config with the same UID while
	// being removed; once stopped it starts again instead of exiting.
	restart bool
	grace   *int64
	lastErr string
	timer   *time.Timer
	// stopped are closed once the pod's containers have stopped (Kill).
	stopped []chan struct{}
	// op is the pending work's operation_type, asked for at opAt (zero:
	// none pending), for kubelet_pod_worker_duration_seconds.
	op   string
	opAt time.Time
}

// request notes work of kind op asked for now. Requests that wait for the
// same pass fold into one, timed from the first; a kill outranks the rest
// and create outranks update and sync.
func (wk *worker) request(op string, now time.Time) {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	if wk.opAt.IsZero() {
		wk.op, wk.opAt = op, now
		return
	}
	if opRank[op] > opRank[wk.op] {
		wk.op = op
	}
}

var opRank = map[string]int{kubeletmetrics.OpSync: 0, kubeletmetrics.OpUpdate: 1, kubeletmetrics.OpCreate: 2, kubeletmetrics.OpKill: 3}

// take returns the pending request and clears it.
func (wk *worker) take() (string, time.Time) {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	op, at := wk.op, wk.opAt
	wk.op, wk.opAt = "", time.Time{}
	return op, at
}

// Workers owns the per-pod workers.
type Workers struct {
	ctx    context.Context
	h      Handler
	log    *slog.Logger
	resync time.Duration

	mu      sync.Mutex
	workers map[types.UID]*worker
	// Static pods of one full name (name_namespace) start one at a time,
	// in the order they came (statics.go): started is the one allowed to
	// run until its worker has cleaned it up, waiting the ones in line.
	started map[string]types.UID
	waiting map[string][]types.UID
	wg      sync.WaitGroup
	metrics *kubeletmetrics.Metrics
}

// Option configures Workers.
type Option func(*Workers)

// WithMetrics times every worker pass in m's
// kubelet_pod_worker_duration_seconds, from the request to the end of the
// pass, by operation_type (create, update, sync, kill, terminated).
func WithMetrics(m *kubeletmetrics.Metrics) Option { return func(w *Workers) { w.metrics = m } }

// New returns workers that resync every pod at least every resync.
func New(ctx context.Context, h Handler, log *slog.Logger, resync time.Duration, opts ...Option) *Workers {
	w := &Workers{ctx: ctx, h: h, log: log, resync: resync, workers: map[types.UID]*worker{},
		started: map[string]types.UID{}, waiting: map[string][]types.UID{}}
	for _, o := range opts {
		o(w)
	}
	return w
}

// Sync starts or updates the worker of pod.
func (w *Workers) Sync(pod *corev1.Pod) { w.update(pod, false, false, nil) }

// Terminate starts graceful termination (a deletion timestamp appeared).
func (w *Workers) Terminate(pod *corev1.Pod, grace *int64) { w.update(pod, true, false, grace) }

// Kill is Terminate for callers that wait (the node shutdown manager, as
// the kubelet's killPodNow): the channel is closed once the pod's
// containers have stopped, at once if they already have.
func (w *Workers) Kill(pod *corev1.Pod, grace *int64) <-chan struct{} {
	ch := make(chan struct{})
	w.mu.Lock()
	wk := w.workers[pod.UID]
	w.mu.Unlock()
	if wk != nil {
		wk.mu.Lock()
		if wk.state == Terminated {
			wk.mu.Unlock()
			close(ch)
			return ch
		}
		wk.stopped = append(wk.stopped, ch)
		wk.mu.Unlock()
		w.update(pod, true, false, grace)
		return ch
	}
	w.update(pod, true, false, grace)
	w.mu.Lock()
	wk = w.workers[pod.UID]
	w.mu.Unlock()
	wk.mu.Lock()
	if wk.state == Terminated {
		close(ch)
	} else {
		wk.stopped = append(wk.stopped, ch)
	}
	wk.mu.Unlock()
	return ch
}

// Remove kills the pod and forgets it once cleaned up (it left the config).
func (w *Workers) Remove(pod *corev1.Pod) { w.update(pod, true, true, nil) }

// Restart is Sync for a pod its source removed and added again with the
// same UID (a static pod's manifest deleted and written back): a worker
// still removing the pod stops it, keeps its stopped containers (their
// restart count goes on, as with the kubelet, whose container GC removes
// them later) and starts it again, as the kubelet's pod workers restart a
// pod whose UID was reused. Without such a worker it is Sync.
func (w *Workers) Restart(pod *corev1.Pod) {
	w.mu.Lock()
	wk := w.workers[pod.UID]
	w.mu.Unlock()
	if wk != nil {
		wk.mu.Lock()
		if wk.remove {
			wk.restart = true
			wk.pod = pod
		}
		wk.mu.Unlock()
	}
	w.update(pod, false, false, nil)
}

// Trigger asks the pod's worker to sync again (a runtime event).
func (w *Workers) Trigger(uid types.UID) {
	w.mu.Lock()
	wk := w.workers[uid]
	w.mu.Unlock()
	if wk != nil {
		wk.request(kubeletmetrics.OpSync, time.Now())
		wk.poke()
	}
}

// Has reports whether a worker exists for uid.
func (w *Workers) Has(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.workers[uid] != nil
}

// List returns every worker.
func (w *Workers) List() []Info {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Info, 0, len(w.workers))
	for uid, wk := range w.workers {
		wk.mu.Lock()
		out = append(out, Info{UID: uid, Namespace: wk.pod.Namespace, Name: wk.pod.Name, State: wk.state, LastError: wk.lastErr})
		wk.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Wait blocks until every worker has exited (after ctx ends).
func (w *Workers) Wait() { w.wg.Wait() }

func (w *Workers) update(pod *corev1.Pod, kill, remove bool, grace *int64) {
	op := kubeletmetrics.OpUpdate
	if kill {
		op = kubeletmetrics.OpKill
	}
	w.mu.Lock()
	wk := w.workers[pod.UID]
	if wk == nil {
		wk = &worker{notify: make(chan struct{}, 1), pod: pod}
		w.workers[pod.UID] = wk
		w.wg.Add(1)
		if !kill {
			op = kubeletmetrics.OpCreate
		}
		w.queueStaticLocked(pod)
		wk.request(op, time.Now())
		go w.run(pod.UID, wk)
	} else {
		wk.request(op, time.Now())
	}
	w.mu.Unlock()
	wk.mu.Lock()
	wk.pod = pod
	if kill {
		wk.kill = true
		if grace != nil {
			wk.grace = grace
		}
	}
	if remove {
		wk.remove = true
	}
	wk.mu.Unlock()
	wk.poke()
}

func (wk *worker) poke() {
	select {
	case wk.notify <- struct{}{}:
	default:
	}
}

func (w *Workers) run(uid types.UID, wk *worker) {
	defer w.wg.Done()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-wk.notify:
		}
		if done := w.step(uid, wk); done {
			w.mu.Lock()
			delete(w.workers, uid)
			w.mu.Unlock()
			return
		}
	}
}

// step advances the pod as far as it can go now; it reports true when the
// worker is finished and should exit.
func (w *Workers) step(uid types.UID, wk *worker) bool {
	// The pass's first handler call answers the pending request.
	op, at := wk.take()
	done := func() {
		if !at.IsZero() {
			w.metrics.PodWorkerDone(op, time.Since(at))
			at = time.Time{}
		}
	}
	defer done()
	for {
		wk.mu.Lock()
		pod, state, kill, remove, grace, restart := wk.pod, wk.state, wk.kill, wk.remove, wk.grace, wk.restart
		wk.mu.Unlock()
		ctx := w.ctx
		switch state {
		case Syncing:
			if kill {
				w.setState(wk, Terminating, "")
				continue
			}
			if !w.allowStart(pod) {
				// Another static pod of this name runs or is ahead in
				// line; the worker is poked when that one is done.
				w.setErr(wk, errWaitingForStaticPod)
				return false
			}
			terminal, requeue, err := w.h.SyncPod(ctx, pod)
			done()
			w.setErr(wk, err)
			if err != nil {
				w.log.Warn("sync failed", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			}
			if terminal {
				w.setState(wk, Terminating, "")
				continue
			}
			next := w.resync
			if err != nil && next > time.Second {
				next = time.Second
			}
			if requeue > 0 && requeue < next {
				next = requeue
			}
			w.later(wk, next)
			return false
		case Terminating:
			err := w.h.SyncTerminatingPod(ctx, pod, grace)
			done()
			if err != nil {
				w.setErr(wk, err)
				w.log.Warn("terminating failed; retrying", "pod", pod.Namespace+"/"+pod.Name, "err", err)
				if ctx.Err() != nil {
					return false
				}
				w.later(wk, time.Second)
				return false
			}
			w.setState(wk, Terminated, "")
			continue
		case Terminated:
			began := time.Now()
			if err := w.h.SyncTerminatedPod(ctx, pod, (remove || kill) && !restart); err != nil {
				w.setErr(wk, err)
				if ctx.Err() != nil {
					return false
				}
				w.later(wk, time.Second)
				return false
			}
			w.setErr(wk, nil)
			done()
			w.metrics.PodWorkerDone(kubeletmetrics.OpTerminated, time.Since(began))
			w.releaseStatic(pod)
			if restart {
				w.restarted(wk)
				w.queueStatic(pod)
				continue
			}
			// A restart asked for while the pod was being removed comes
			// too late for this worker, which exits; the pod is wanted
			// again and has no worker, so the owner adds it anew.
			return remove
		}
	}
}

func (w *Workers) setState(wk *worker, s State, errText string) {
	wk.mu.Lock()
	wk.state = s
	wk.lastErr = errText
	var stopped []chan struct{}
	if s == Terminated {
		stopped, wk.stopped = wk.stopped, nil
	}
	wk.mu.Unlock()
	for _, ch := range stopped {
		close(ch)
	}
}

// restarted puts a worker that stopped its pod for a restart back to
// syncing, with nothing of the termination left.
func (w *Workers) restarted(wk *worker) {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	wk.state, wk.kill, wk.remove, wk.restart, wk.grace = Syncing, false, false, false, nil
}

func (w *Workers) setErr(wk *worker, err error) {
	wk.mu.Lock()
	wk.lastErr = ""
	if err != nil {
		wk.lastErr = err.Error()
	}
	wk.mu.Unlock()
}

func (w *Workers) later(wk *worker, d time.Duration) {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	if wk.timer != nil {
		wk.timer.Stop()
	}
	wk.timer = time.AfterFunc(d, func() {
		wk.request(kubeletmetrics.OpSync, time.Now())
		wk.poke()
	})
}
