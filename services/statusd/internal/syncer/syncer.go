package syncer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/internal/podsource"
	"github.com/microlet/microlet/services/statusd/internal/cache"
	"github.com/microlet/microlet/services/statusd/internal/podstatus"
)

// Defaults of the tunables.
const (
	// DefaultWorkers bounds the PATCHes in flight. A status write spends
	// most of its time waiting on the API server and etcd, so throughput is
	// workers / latency until the API server's CPU is the limit: on two
	// cores 8 workers reached about half of what the API server sustains,
	// 16 and 32 about nine tenths (services/statusd/bench). Under a
	// client-side QPS limit the extra workers wait on the limiter.
	DefaultWorkers         = 32
	DefaultReconcilePeriod = 10 * time.Second
)

// Syncer sends cached statuses to the API server.
type Syncer struct {
	client   kubernetes.Interface
	cache    *cache.Cache
	informer toolscache.SharedIndexInformer
	lister   corelisters.PodLister
	queue    workqueue.TypedRateLimitingInterface[string]
	log      *slog.Logger
	metrics  *Metrics
	clock    clock.Clock
	workers  int
	period   time.Duration
	reg      prometheus.Registerer

	mu       sync.Mutex
	force    map[string]bool        // reconcile: resend with a live GET
	written  map[string]*corev1.Pod // our last write's answer, fresher than the informer
	syncedTo map[string]types.UID   // the API object a pod's status was last synced to
	tooLarge map[string]uint64      // the version of a pod's status the API server refused as too large
}

// Option configures a Syncer.
type Option func(*Syncer)

// WithWorkers sets how many pods are synced in parallel.
func WithWorkers(n int) Option { return func(s *Syncer) { s.workers = n } }

// WithReconcilePeriod sets the period of the full reconcile pass.
func WithReconcilePeriod(d time.Duration) Option { return func(s *Syncer) { s.period = d } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(s *Syncer) { s.log = l } }

// WithRegisterer registers the syncer's metrics (and its queue depth) on reg.
func WithRegisterer(reg prometheus.Registerer) Option { return func(s *Syncer) { s.reg = reg } }

// WithClock sets the clock of the reconcile loop and latency measurements.
func WithClock(c clock.Clock) Option { return func(s *Syncer) { s.clock = c } }

// New returns a syncer for the pods in informer (this node's pods).
func New(client kubernetes.Interface, c *cache.Cache, informer toolscache.SharedIndexInformer, opts ...Option) *Syncer {
	s := &Syncer{
		client: client, cache: c, informer: informer,
		lister:   corelisters.NewPodLister(informer.GetIndexer()),
		log:      slog.Default(),
		clock:    clock.RealClock{},
		workers:  DefaultWorkers,
		period:   DefaultReconcilePeriod,
		force:    map[string]bool{},
		written:  map[string]*corev1.Pod{},
		syncedTo: map[string]types.UID{},
		tooLarge: map[string]uint64{},
	}
	for _, o := range opts {
		o(s)
	}
	s.metrics = NewMetrics(s.reg)
	s.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "statusd"})
	if s.reg != nil {
		s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "statusd_queue_depth", Help: "Pods waiting to be synced."},
			func() float64 { return float64(s.queue.Len()) }))
	}
	_, _ = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { s.apiPodChanged(obj, true) },
		UpdateFunc: func(old, obj any) {
			// Another writer flipping a readiness gate's condition changes
			// the Ready condition this node must publish.
			o, ok1 := old.(*corev1.Pod)
			n, ok2 := obj.(*corev1.Pod)
			s.apiPodChanged(obj, ok1 && ok2 && podstatus.GateConditionsChanged(o, n))
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			s.apiPodChanged(obj, true)
		},
	})
	return s
}

// Metrics returns the syncer's collectors.
func (s *Syncer) Metrics() *Metrics { return s.metrics }

// Enqueue asks for uid to be synced; calls before it is synced coalesce.
func (s *Syncer) Enqueue(uid string) { s.queue.Add(uid) }

// apiPodChanged queues the cached statuses an API event concerns: new pods
// (a mirror pod appearing lets its static pod sync), deleted ones, pods
// that got a deletion timestamp (they may now be deletable), and, with
// always, any other change the caller judged relevant.
func (s *Syncer) apiPodChanged(obj any, always bool) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if !always && pod.DeletionTimestamp == nil {
		return
	}
	for _, uid := range s.cache.UIDsByName(pod.Namespace, pod.Name) {
		s.queue.Add(uid)
	}
}

// Run syncs until ctx ends.
func (s *Syncer) Run(ctx context.Context) {
	defer s.queue.ShutDown()
	if !toolscache.WaitForCacheSync(ctx.Done(), s.informer.HasSynced) {
		return
	}
	for _, uid := range s.cache.UIDs() {
		s.queue.Add(uid) // after a restart, everything loaded is checked
	}
	var wg sync.WaitGroup
	for range s.workers {
		wg.Go(func() {
			for s.processNext(ctx) {
			}
		})
	}
	wait.Until(func() { s.reconcile() }, s.period, ctx.Done())
	s.queue.ShutDown()
	wg.Wait()
}

func (s *Syncer) processNext(ctx context.Context) bool {
	uid, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(uid)
	err := s.syncPod(ctx, uid)
	switch {
	case err == nil:
		s.queue.Forget(uid)
	case ctx.Err() != nil:
	default:
		if d, ok := apierrors.SuggestsClientDelay(err); ok && d > 0 {
			s.log.Info("API server asked to wait", "uid", uid, "seconds", d)
			s.queue.AddAfter(uid, time.Duration(d)*time.Second)
		} else {
			s.log.Warn("status sync failed; retrying with backoff", "uid", uid, "err", err)
			s.queue.AddRateLimited(uid)
		}
	}
	return true
}

// reconcile is the periodic pass: unsent statuses, statuses the API copy
// disagrees with (resent with a live GET) and deletable pods are queued.
func (s *Syncer) reconcile() {
	for _, uid := range s.cache.UIDs() {
		e, ok := s.cache.Get(uid)
		if !ok {
			continue
		}
		if s.refusedAsTooLarge(&e) {
			continue
		}
		if e.SyncedVersion < e.Version {
			s.queue.Add(uid)
			continue
		}
		target, err := s.target(&e)
		if err != nil || target == nil {
			continue
		}
		if podstatus.NeedsReconcile(target, &e.Status) {
			s.mu.Lock()
			s.force[uid] = true
			s.mu.Unlock()
			s.queue.Add(uid)
		} else if podstatus.CanBeDeleted(target, e.Reclaimed) {
			s.queue.Add(uid)
		}
	}
}

// target returns the informer's copy of the API object that carries e's
// status: the pod itself, or for a static pod its mirror pod. nil when the
// API has none yet.
func (s *Syncer) target(e *cache.Entry) (*corev1.Pod, error) {
	pod, err := s.lister.Pods(e.Namespace).Get(e.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if podsource.IsStatic(e.Pod) && !mirrors(pod, e.Pod) {
		// A regular pod squats the name, or the mirror pod is another
		// version's: while an old static pod terminates its mirror shows
		// it, and the new pod's status waits for a mirror of its own.
		return nil, nil
	}
	return pod, nil
}

// mirrors reports whether apiPod is the mirror pod of static: the mirror
// annotation holds static's config hash (any mirror pod when static has
// no hash).
func mirrors(apiPod, static *corev1.Pod) bool {
	if !podsource.IsMirror(apiPod) {
		return false
	}
	hash := static.Annotations[podsource.HashAnnotation]
	return hash == "" || apiPod.Annotations[podsource.MirrorAnnotation] == hash
}

func rv(p *corev1.Pod) uint64 {
	n, _ := strconv.ParseUint(p.ResourceVersion, 10, 64)
	return n
}

// newest picks between the informer copy and our last write's answer.
func (s *Syncer) newest(uid string, informer *corev1.Pod) *corev1.Pod {
	s.mu.Lock()
	w := s.written[uid]
	s.mu.Unlock()
	if w != nil && w.UID == informer.UID && rv(w) > rv(informer) {
		return w
	}
	return informer
}

func (s *Syncer) countErr(err error) {
	code := "0"
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		code = strconv.Itoa(int(st.Status().Code))
	}
	s.metrics.Errors.WithLabelValues(code).Inc()
}

func (s *Syncer) liveGet(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	s.metrics.LiveGets.Inc()
	p, err := s.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			s.countErr(err)
		}
		return nil, err
	}
	return p, nil
}

// syncPod brings one pod's API status up to its cached version.
func (s *Syncer) syncPod(ctx context.Context, uid string) error {
	e, ok := s.cache.Get(uid)
	if !ok {
		s.mu.Lock()
		delete(s.written, uid)
		delete(s.force, uid)
		delete(s.syncedTo, uid)
		delete(s.tooLarge, uid)
		s.mu.Unlock()
		return nil
	}
	if s.refusedAsTooLarge(&e) {
		return nil
	}
	s.mu.Lock()
	force := s.force[uid]
	delete(s.force, uid)
	s.mu.Unlock()
	static := podsource.IsStatic(e.Pod)

	base, err := s.target(&e)
	if err != nil {
		return err
	}
	if base == nil {
		return nil // not in the API (yet); an informer event queues it again
	}
	base = s.newest(uid, base)
	s.mu.Lock()
	if last, ok := s.syncedTo[uid]; ok && last != base.UID {
		force = true // a recreated mirror pod: it has none of our status yet
	}
	s.mu.Unlock()
	if force || (!static && string(base.UID) != uid) {
		live, err := s.liveGet(ctx, e.Namespace, e.Name)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if static && !mirrors(live, e.Pod) {
			return nil
		}
		base = live
	}
	if !static && string(base.UID) != uid {
		s.log.Info("pod was recreated; dropping the old pod's status", "pod", e.Namespace+"/"+e.Name, "oldUID", uid, "uid", base.UID)
		return s.cache.Remove(uid)
	}

	if e.SyncedVersion < e.Version || force {
		for attempt := 0; ; attempt++ {
			res, err := s.patch(ctx, &e, base)
			if err == nil {
				if res != nil {
					base = res
				}
				s.mu.Lock()
				s.syncedTo[uid] = base.UID
				s.mu.Unlock()
				break
			}
			if apierrors.IsNotFound(err) {
				return nil
			}
			if tooLarge(err) {
				s.holdTooLarge(&e, err)
				return nil
			}
			if !(apierrors.IsConflict(err) || uidMismatch(err)) || attempt >= 2 {
				return err
			}
			live, gerr := s.liveGet(ctx, e.Namespace, e.Name)
			if apierrors.IsNotFound(gerr) {
				return nil
			}
			if gerr != nil {
				return gerr
			}
			if !static && string(live.UID) != uid {
				s.log.Info("pod was recreated; dropping the old pod's status", "pod", e.Namespace+"/"+e.Name, "oldUID", uid, "uid", live.UID)
				return s.cache.Remove(uid)
			}
			if static && !mirrors(live, e.Pod) {
				return nil
			}
			base = live
		}
	}

	if !static && podstatus.CanBeDeleted(base, e.Reclaimed) {
		grace := int64(0)
		err := s.client.CoreV1().Pods(e.Namespace).Delete(ctx, e.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &grace,
			Preconditions:      metav1.NewUIDPreconditions(string(base.UID)),
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			s.countErr(err)
			return fmt.Errorf("delete terminated pod: %w", err)
		}
		if err == nil {
			s.metrics.Writes.WithLabelValues("delete").Inc()
			s.log.Info("terminated pod deleted from the API", "pod", e.Namespace+"/"+e.Name, "uid", uid)
		}
		return s.cache.Remove(uid)
	}
	return nil
}

// uidMismatch reports the API server's refusal of a patch whose metadata.uid
// precondition names another pod. kube-apiserver 1.36 answers it with 422
// Invalid ("metadata.uid: field is immutable"), not 409, so both mean "the
// pod under this name is not the one we have a status for".
func uidMismatch(err error) bool {
	if !apierrors.IsInvalid(err) {
		return false
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	for _, c := range st.Status().Details.Causes {
		if c.Field == "metadata.uid" {
			return true
		}
	}
	return false
}

// tooLarge reports the API server's refusal of a write as too large: its
// request body limit (413), or etcd's request limit, which reaches the
// client only as a 500 with etcd's (or its gRPC client's) words in it.
func tooLarge(err error) bool {
	if apierrors.IsRequestEntityTooLargeError(err) {
		return true
	}
	if !apierrors.IsInternalError(err) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "request is too large") || strings.Contains(msg, "message larger than max")
}

// refusedAsTooLarge reports whether e's version is the one the API server
// refused as too large: it is not written again until the status changes.
func (s *Syncer) refusedAsTooLarge(e *cache.Entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.tooLarge[e.UID]
	if ok && v != e.Version {
		delete(s.tooLarge, e.UID)
		return false
	}
	return ok
}

// RefusedAsTooLarge reports whether version of the pod's status is the one
// the API server refused as too large.
func (s *Syncer) RefusedAsTooLarge(uid string, version uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.tooLarge[uid]
	return ok && v == version
}

// holdTooLarge records that the API server refused e's version as too
// large, says so once and counts it.
func (s *Syncer) holdTooLarge(e *cache.Entry, err error) {
	s.mu.Lock()
	s.tooLarge[e.UID] = e.Version
	s.mu.Unlock()
	s.metrics.TooLarge.Inc()
	size := -1
	if b, merr := e.Status.Marshal(); merr == nil {
		size = len(b)
	}
	s.log.Warn("API server refused the pod's status as too large; it is not sent again until it changes",
		"pod", e.Namespace+"/"+e.Name, "uid", e.UID, "version", e.Version, "statusBytes", size, "err", err)
}

// patch writes e's status over base; it returns the API's answer, or nil when
// nothing needed writing.
func (s *Syncer) patch(ctx context.Context, e *cache.Entry, base *corev1.Pod) (*corev1.Pod, error) {
	merged := podstatus.Merge(base, base.Status, e.Status, podstatus.CouldHaveRunningContainers(&e.Status, e.Reclaimed))
	data, unchanged, err := StatusPatch(base.UID, &base.Status, &merged)
	if err != nil {
		return nil, err
	}
	if unchanged {
		s.metrics.Skipped.Inc()
		s.done(e)
		return nil, nil
	}
	res, err := s.client.CoreV1().Pods(base.Namespace).Patch(ctx, base.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status")
	if err != nil {
		if !apierrors.IsNotFound(err) {
			s.countErr(err)
		}
		return nil, err
	}
	s.metrics.Writes.WithLabelValues("patch").Inc()
	s.mu.Lock()
	s.written[e.UID] = res
	s.mu.Unlock()
	s.done(e)
	return res, nil
}

func (s *Syncer) done(e *cache.Entry) {
	if carried := s.cache.MarkSynced(e.UID, e.Version); carried > 1 {
		s.metrics.Coalesced.Add(float64(carried - 1))
	}
	if !e.Changed.IsZero() {
		// Changed may come from the store, written by an earlier run: a
		// wall-clock reading that a clock stepped back since reads in the
		// future. A latency below zero would pull the histogram's sum down;
		// it counts as zero.
		s.metrics.SyncLatency.Observe(max(s.clock.Since(e.Changed), 0).Seconds())
	}
}

// statusSchema is the strategic-merge metadata of PodStatus (merge keys and
// strategies of its lists), looked up by reflection once.
var statusSchema = sync.OnceValues(func() (strategicpatch.LookupPatchMeta, error) {
	return strategicpatch.NewPatchMetaFromStruct(corev1.PodStatus{})
})

// StatusPatch is the strategic merge patch from old to next, with the pod's
// UID in metadata so the API server refuses it for a different pod (409).
// unchanged is true when the patch would carry nothing but that precondition.
//
// The diff is taken between the statuses' unstructured forms, converted
// straight from the Go structs: the same patch as
// strategicpatch.CreateTwoWayMergePatch over JSON, without encoding and
// decoding both statuses, which cost most of a sync's CPU.
func StatusPatch(uid types.UID, old, next *corev1.PodStatus) (patch []byte, unchanged bool, err error) {
	schema, err := statusSchema()
	if err != nil {
		return nil, false, fmt.Errorf("status patch schema: %w", err)
	}
	oldMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(old)
	if err != nil {
		return nil, false, fmt.Errorf("status patch: %w", err)
	}
	nextMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(next)
	if err != nil {
		return nil, false, fmt.Errorf("status patch: %w", err)
	}
	diff, err := strategicpatch.CreateTwoWayMergeMapPatchUsingLookupPatchMeta(oldMap, nextMap, schema)
	if err != nil {
		return nil, false, fmt.Errorf("status patch: %w", err)
	}
	body := map[string]any{"metadata": map[string]any{"uid": uid}}
	if len(diff) > 0 {
		body["status"] = map[string]any(diff)
	}
	patch, err = json.Marshal(body)
	if err != nil {
		return nil, false, fmt.Errorf("status patch: %w", err)
	}
	return patch, len(diff) == 0, nil
}
