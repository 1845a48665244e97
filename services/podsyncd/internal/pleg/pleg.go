package pleg

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"

	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
)

// Runtime is the part of the CRI runtime service the relister reads
// (cri-client's runtime service has it).
type Runtime interface {
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	GetContainerEvents(ctx context.Context, ch chan *runtimeapi.ContainerEventResponse, established func(runtimeapi.RuntimeService_GetContainerEventsClient)) error
}

var _ Runtime = criapi.RuntimeService(nil)

// Relister reports changed pods.
type Relister struct {
	rt       Runtime
	period   time.Duration
	onChange func(types.UID)
	log      *slog.Logger
	metrics  *kubeletmetrics.Metrics
	observer Observer
	// lastOK is when the last successful relist began.
	lastOK time.Time

	// mu guards last, which Holds reads from other goroutines.
	mu sync.Mutex
	// last is each pod's fingerprint in the last successful relist (nil
	// before the first).
	last map[types.UID]string
}

// Holds says whether the last successful relist saw runtime state (a
// sandbox or a container) of the pod; known is false until a relist has
// succeeded. A pod that podsyncd has not started since the relist can only
// have state the relist saw, so a new pod's admission need not read the
// runtime to learn that it has none.
func (r *Relister) Holds(uid types.UID) (held, known bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		return false, false
	}
	_, held = r.last[uid]
	return held, true
}

// Option configures a Relister.
type Option func(*Relister)

// WithMetrics records the kubelet's PLEG metrics (relist duration and
// interval, last seen) and the running pods and containers in m.
func WithMetrics(m *kubeletmetrics.Metrics) Option { return func(r *Relister) { r.metrics = m } }

// Observer hears what the relister learns besides the changed pods' UIDs
// (a Cache).
type Observer interface {
	// Changed is called for a changed pod before its onChange.
	Changed(uid types.UID)
	// Relisted is called once a relist that began at start succeeded,
	// after the Changed calls of its changes.
	Relisted(start time.Time)
}

// WithObserver tells o about every change before onChange, and about each
// successful relist.
func WithObserver(o Observer) Option { return func(r *Relister) { r.observer = o } }

// changed reports a change of uid.
func (r *Relister) changed(uid types.UID) {
	if r.observer != nil {
		r.observer.Changed(uid)
	}
	r.onChange(uid)
}

// New returns a relister calling onChange for every pod whose runtime state changed.
func New(rt Runtime, period time.Duration, log *slog.Logger, onChange func(types.UID), opts ...Option) *Relister {
	r := &Relister{rt: rt, period: period, onChange: onChange, log: log}
	for _, o := range opts {
		o(r)
	}
	return r
}

// containerStates are the kubelet's names of the CRI container states.
var containerStates = map[runtimeapi.ContainerState]string{
	runtimeapi.ContainerState_CONTAINER_CREATED: "created",
	runtimeapi.ContainerState_CONTAINER_RUNNING: "running",
	runtimeapi.ContainerState_CONTAINER_EXITED:  "exited",
	runtimeapi.ContainerState_CONTAINER_UNKNOWN: "unknown",
}

// Run relists until ctx ends, and follows the runtime's event stream alongside.
func (r *Relister) Run(ctx context.Context) {
	go r.events(ctx)
	t := time.NewTicker(r.period)
	defer t.Stop()
	for {
		if err := r.Relist(ctx); err != nil && ctx.Err() == nil {
			r.log.Debug("relist failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Relist compares the runtime with the previous relist once.
func (r *Relister) Relist(ctx context.Context) (err error) {
	start := time.Now()
	var since time.Duration
	if !r.lastOK.IsZero() {
		since = start.Sub(r.lastOK)
	}
	defer func() {
		if err == nil {
			r.lastOK = start
		}
		r.metrics.Relisted(start, time.Since(start), since, err == nil)
	}()
	sbs, err := r.rt.ListPodSandbox(ctx, nil)
	if err != nil {
		return err
	}
	cs, err := r.rt.ListContainers(ctx, nil)
	if err != nil {
		return err
	}
	parts := map[types.UID][]string{}
	ready := map[types.UID]bool{}
	for _, sb := range sbs {
		uid := types.UID(sb.Labels[kubelettypes.KubernetesPodUIDLabel])
		if uid == "" {
			continue
		}
		parts[uid] = append(parts[uid], "s:"+sb.Id+":"+sb.State.String())
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			ready[uid] = true
		}
	}
	states := map[string]int{}
	for _, c := range cs {
		uid := types.UID(c.Labels[kubelettypes.KubernetesPodUIDLabel])
		if uid == "" {
			continue
		}
		parts[uid] = append(parts[uid], "c:"+c.Id+":"+c.State.String())
		states[containerStates[c.State]]++
	}
	r.metrics.SetRunning(len(ready), states)
	now := map[types.UID]string{}
	for uid, p := range parts {
		sort.Strings(p)
		now[uid] = strings.Join(p, ",")
	}
	for uid, fp := range now {
		if r.last[uid] != fp {
			r.changed(uid)
		}
	}
	for uid := range r.last {
		if _, ok := now[uid]; !ok {
			r.changed(uid)
		}
	}
	r.mu.Lock()
	r.last = now
	r.mu.Unlock()
	if r.observer != nil {
		r.observer.Relisted(start)
	}
	return nil
}

// eventsBackoff spaces the attempts to follow GetContainerEvents: 1 s
// doubling to 30 s, from the start again after a stream delivered.
var eventsBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Steps: math.MaxInt32, Cap: 30 * time.Second}

// events follows GetContainerEvents; a runtime without it answers
// Unimplemented and relist alone carries on. cri-client's call blocks,
// sending each event on ch until the stream ends, so ch is drained until it
// returns.
func (r *Relister) events(ctx context.Context) {
	delay := eventsBackoff.DelayFunc()
	for ctx.Err() == nil {
		ch := make(chan *runtimeapi.ContainerEventResponse)
		done := make(chan error, 1)
		go func() { done <- r.rt.GetContainerEvents(ctx, ch, nil) }()
	follow:
		for {
			select {
			case ev := <-ch:
				delay = eventsBackoff.DelayFunc()
				if sb := ev.GetPodSandboxStatus(); sb != nil && sb.Metadata != nil {
					r.changed(types.UID(sb.Metadata.Uid))
				}
			case err := <-done:
				if !errors.Is(err, io.EOF) && ctx.Err() == nil {
					r.log.Debug("container event stream ended", "err", err)
				}
				break follow
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay()):
		}
	}
}
