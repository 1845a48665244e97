package statusreport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
)

// callTimeout bounds one exchange with statusd.
const callTimeout = 10 * time.Second

// Resend backoff: the first resend after a failure waits MinResend, each
// failed round doubles it up to MaxResend, a round where everything went
// through starts again from MinResend.
const (
	MinResend = time.Second
	MaxResend = 30 * time.Second
)

// Result is told the outcome of every exchange with statusd about pod:
// err nil once statusd took what was waiting, the error otherwise. A
// status statusd refused as invalid is not a failure here: refusals says
// and counts it.
type Result func(ctx context.Context, pod *corev1.Pod, err error)

// Reporter hands statusd the pods' statuses and reclaim reports, keeping
// what statusd has not taken until it does. Calls for one pod reach
// statusd one at a time and in order, so a resend never overtakes a newer
// status; calls for different pods run in parallel.
type Reporter struct {
	client   statusdv1.StatusServiceClient
	log      *slog.Logger
	clock    clock.Clock
	result   Result
	refusals *refusals
	kick     chan struct{}

	mu   sync.Mutex
	pods map[types.UID]*entry
}

// entry is what waits for one pod. send is held for each exchange with
// statusd; the other fields are guarded by Reporter.mu.
type entry struct {
	send sync.Mutex
	uid  types.UID

	users   int // callers holding or waiting for send
	pod     *corev1.Pod
	pb, sb  []byte // the waiting status, encoded, and its pod
	status  bool   // a status waits
	reclaim bool   // a reclaim report waits
}

func (e *entry) waiting() bool { return e.status || e.reclaim }

// Option configures a Reporter.
type Option func(*Reporter)

// WithClock sets the clock the resend backoff waits on.
func WithClock(c clock.Clock) Option { return func(r *Reporter) { r.clock = c } }

// WithResult sets the function told every exchange's outcome.
func WithResult(f Result) Option { return func(r *Reporter) { r.result = f } }

// New returns a reporter to client; a nil client (no statusd) takes
// everything and sends nothing. Its metrics go to reg when it is not nil.
func New(client statusdv1.StatusServiceClient, log *slog.Logger, reg prometheus.Registerer, opts ...Option) *Reporter {
	r := &Reporter{
		client: client, log: log, clock: clock.RealClock{},
		result:   func(context.Context, *corev1.Pod, error) {},
		refusals: newRefusals(log, reg),
		kick:     make(chan struct{}, 1),
		pods:     map[types.UID]*entry{},
	}
	for _, o := range opts {
		o(r)
	}
	if reg != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "microlet", Subsystem: "podsyncd", Name: "status_reports_waiting",
			Help: "Pods with a status or reclaim report statusd has not taken yet; they are resent with backoff.",
		}, func() float64 { return float64(r.Waiting()) }))
	}
	return r
}

// Status hands statusd pod's status st now; if statusd does not take it,
// it waits (replacing any older status of the pod) and is resent.
func (r *Reporter) Status(ctx context.Context, pod *corev1.Pod, st *corev1.PodStatus) {
	if r.client == nil {
		return
	}
	pb, err := pod.Marshal()
	if err == nil {
		var sb []byte
		if sb, err = st.Marshal(); err == nil {
			e := r.acquire(pod.UID)
			r.mu.Lock()
			e.pod, e.pb, e.sb, e.status = pod, pb, sb, true
			r.mu.Unlock()
			r.deliver(ctx, e)
			return
		}
	}
	r.result(ctx, pod, fmt.Errorf("encoding the status: %w", err))
}

// Reclaimed tells statusd pod's resources are released, after any status
// of the pod that still waits; if statusd does not take it, it is resent.
func (r *Reporter) Reclaimed(ctx context.Context, pod *corev1.Pod) {
	if r.client == nil {
		return
	}
	e := r.acquire(pod.UID)
	r.mu.Lock()
	e.reclaim = true
	if e.pod == nil {
		e.pod = pod
	}
	r.mu.Unlock()
	r.deliver(ctx, e)
}

// Forget drops whatever waits for a pod that is gone.
func (r *Reporter) Forget(uid types.UID) {
	r.refusals.forget(uid)
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.pods[uid]; e != nil {
		e.status, e.reclaim = false, false
		if e.users == 0 {
			delete(r.pods, uid)
		}
	}
}

// Waiting counts the pods with something statusd has not taken.
func (r *Reporter) Waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.pods {
		if e.waiting() {
			n++
		}
	}
	return n
}

// Run resends what waits until ctx ends: after a failure it waits the
// backoff, then tries every waiting pod once.
func (r *Reporter) Run(ctx context.Context) {
	b := r.backoff()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.clock.After(b.Step()):
			}
			if r.resendAll(ctx) {
				b = r.backoff()
				break
			}
		}
	}
}

func (r *Reporter) backoff() wait.Backoff {
	return wait.Backoff{Duration: MinResend, Factor: 2, Cap: MaxResend, Steps: 1 << 30}
}

// resendAll tries each waiting pod once and reports whether all went through.
func (r *Reporter) resendAll(ctx context.Context) bool {
	r.mu.Lock()
	var uids []types.UID
	for uid, e := range r.pods {
		if e.waiting() {
			uids = append(uids, uid)
		}
	}
	r.mu.Unlock()
	ok := true
	for _, uid := range uids {
		// A pod forgotten meanwhile has nothing waiting: deliver sends
		// nothing and drops the entry acquire made again.
		if !r.deliver(ctx, r.acquire(uid)) {
			ok = false
		}
		if ctx.Err() != nil {
			return false
		}
	}
	return ok
}

// acquire returns uid's entry with its send lock held; deliver releases it.
func (r *Reporter) acquire(uid types.UID) *entry {
	r.mu.Lock()
	e := r.pods[uid]
	if e == nil {
		e = &entry{uid: uid}
		r.pods[uid] = e
	}
	e.users++
	r.mu.Unlock()
	e.send.Lock()
	return e
}

// deliver sends what waits in e (the status first, then the reclaim
// report), releases e, and reports whether nothing waits any more. What
// statusd does not take stays and the resend loop is woken.
func (r *Reporter) deliver(ctx context.Context, e *entry) bool {
	r.mu.Lock()
	pod, pb, sb, st, rc := e.pod, e.pb, e.sb, e.status, e.reclaim
	r.mu.Unlock()
	sent := st || rc
	var err error
	if st {
		err = r.refusals.send(ctx, r.client, pod, pb, sb)
		if errors.Is(err, errStatusHeld) {
			err = nil
		}
		if err == nil {
			st = false
		}
	}
	if err == nil && rc {
		err = r.sendReclaimed(ctx, pod.UID)
		if err == nil {
			rc = false
		}
	}
	if sent {
		r.result(ctx, pod, err)
	}
	r.mu.Lock()
	// A Forget while this was sent cleared the flags: they stay cleared.
	e.status = e.status && st
	e.reclaim = e.reclaim && rc
	e.users--
	done := !e.waiting()
	if done && e.users == 0 {
		delete(r.pods, e.uid)
	}
	r.mu.Unlock()
	e.send.Unlock()
	if !done {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	return done
}

func (r *Reporter) sendReclaimed(ctx context.Context, uid types.UID) error {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, err := r.client.ReportPodResourcesReclaimed(cctx, &statusdv1.ReportPodResourcesReclaimedRequest{PodUid: string(uid)})
	if status.Code(err) == codes.NotFound {
		return nil // statusd already finished with the pod (a repeated report)
	}
	if err != nil {
		return fmt.Errorf("reporting the pod's resources reclaimed: %w", err)
	}
	return nil
}
