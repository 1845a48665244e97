package syncloop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/internal/podsource"
	"github.com/microlet/microlet/internal/podutil"
	nodestatusv1 "github.com/microlet/microlet/proto/microlet/nodestatus/v1"
	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
	"github.com/microlet/microlet/services/podsyncd/internal/admission"
	"github.com/microlet/microlet/services/podsyncd/internal/allocation"
	"github.com/microlet/microlet/services/podsyncd/internal/containergc"
	"github.com/microlet/microlet/services/podsyncd/internal/desired"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
	"github.com/microlet/microlet/services/podsyncd/internal/nodeshutdown"
	"github.com/microlet/microlet/services/podsyncd/internal/pleg"
	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
	"github.com/microlet/microlet/services/podsyncd/internal/podstatus"
	"github.com/microlet/microlet/services/podsyncd/internal/podworkers"
	"github.com/microlet/microlet/services/podsyncd/internal/prober"
	"github.com/microlet/microlet/services/podsyncd/internal/statusreport"
)

// Options tune the loop; zero values take the kubelet's defaults (Default,
// containergc.DefaultPeriod).
type Options struct {
	ResyncPeriod       time.Duration // per-pod resync
	RelistPeriod       time.Duration // PLEG relist
	HousekeepingPeriod time.Duration // housekeeping
	// ContainerGC collects dead containers, sandboxes and pod log dirs
	// every ContainerGCPeriod (1 min); nil collects nothing.
	ContainerGC       *containergc.GC
	ContainerGCPeriod time.Duration
	Clock             clock.Clock
	// Allocation holds the allocated and actuated resources and the resize
	// conditions (in-place resize); nil runs every pod at its spec.
	Allocation *allocation.State
	// Cgroups manages pod cgroups (cgroupsPerQOS); nil runs pods without.
	Cgroups PodCgroups
	// FreshNode reads this node's Node from the API server, bypassing every
	// cache: admission asks it when node affinity is the only reason to
	// refuse a pod, in case the labels changed moments ago (a DaemonSet's
	// pod created right after its node was labelled), as the kubelet's
	// predicate handler fetches the node synchronously and tries again.
	// nil (standalone) keeps the first answer.
	FreshNode func(ctx context.Context) (*corev1.Node, error)
	// AdmitPressure is the eviction manager's admission under node
	// pressure, asked before the other predicates; nil admits.
	AdmitPressure func(pod *corev1.Pod) (ok bool, reason, message string)
	// Sysctls refuses pods asking for sysctls that are not allowed (the
	// kubelet's sysctl handler, asked after AdmitPressure); nil admits.
	Sysctls *admission.Sysctls
	// AppArmor refuses pods asking for an AppArmor profile the node cannot
	// enforce (the kubelet's AppArmor handler, asked after the
	// predicates); nil admits.
	AppArmor *admission.AppArmor
	// Shutdown refuses new pods while the node shuts down (the node
	// shutdown manager's admit handler, asked after the others as the
	// kubelet's is); nil admits.
	Shutdown ShutdownAdmitter
	// Metrics receives the kubelet's metrics of the loop and its parts
	// (pod workers, PLEG, prober, admission, pod counts); nil records none.
	Metrics *kubeletmetrics.Metrics
	// Startup measures the pod start SLI from the API pods the sources
	// deliver and the statuses the loop reports; nil measures nothing.
	Startup *kubeletmetrics.StartupTracker
	// Registerer takes the container garbage collector's counters
	// (microlet_podsyncd_container_gc_passes_total,
	// microlet_podsyncd_container_gc_removed_total) and the failures of
	// the loop's upkeep (microlet_podsyncd_housekeeping_failures_total),
	// which the kubelet does not have; nil keeps them unserved.
	Registerer prometheus.Registerer
}

// ShutdownAdmitter is the node shutdown manager's admission check.
type ShutdownAdmitter interface {
	Admit() (ok bool, reason, message string)
}

// Loop is the sync loop.
type Loop struct {
	opts     Options
	log      *slog.Logger
	rm       *podruntime.Manager
	rt       criapi.RuntimeService
	podcfg   podconfigv1.PodConfigServiceClient
	status   statusdv1.StatusServiceClient
	nodes    nodestatusv1.NodeStatusServiceClient
	store    *desired.Store
	workers  *podworkers.Workers
	relister *pleg.Relister
	// podCache holds each pod's runtime status while the relister sees
	// it unchanged: a resync of an unchanged pod reads nothing.
	podCache *pleg.Cache[podruntime.PodStatus]
	probes   *prober.Manager
	// stopWorkers ends the pod workers' context, made with them in New;
	// Run calls it when its own context ends.
	stopWorkers context.CancelFunc

	gcMetrics *gcMetrics
	failures  *failures
	// reports hands statusd the statuses and reclaim reports, resending
	// what it could not take.
	reports *statusreport.Reporter

	// allocMu serialises admission decisions (new pods and resizes).
	allocMu sync.Mutex
	// pods is each pod's state: admitted or refused, last status, why
	// podsyncd ends it, cleaned up, removed from its source.
	pods *podStates
	// nodeMu guards node, this node's Node as last read, and nodeAt, when.
	nodeMu sync.Mutex
	node   *corev1.Node
	nodeAt time.Time
}

// New builds a loop over the given clients.
func New(log *slog.Logger, rm *podruntime.Manager, rt criapi.RuntimeService, podcfg podconfigv1.PodConfigServiceClient,
	status statusdv1.StatusServiceClient, nodes nodestatusv1.NodeStatusServiceClient, opts Options) *Loop {
	def := Default()
	if opts.ResyncPeriod == 0 {
		opts.ResyncPeriod = def.ResyncPeriod
	}
	if opts.RelistPeriod == 0 {
		opts.RelistPeriod = def.RelistPeriod
	}
	if opts.HousekeepingPeriod == 0 {
		opts.HousekeepingPeriod = def.HousekeepingPeriod
	}
	if opts.ContainerGCPeriod == 0 {
		opts.ContainerGCPeriod = containergc.DefaultPeriod
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	l := &Loop{
		opts: opts, log: log, rm: rm, rt: rt, podcfg: podcfg, status: status, nodes: nodes,
		pods:      newPodStates(),
		gcMetrics: newGCMetrics(opts.Registerer),
		failures:  newFailures(log, opts.Registerer),
	}
	l.reports = statusreport.New(status, log, opts.Registerer, statusreport.WithClock(opts.Clock),
		statusreport.WithResult(func(ctx context.Context, pod *corev1.Pod, err error) {
			l.failures.observe(ctx, stepStatusReport, string(pod.UID), err, "pod", pod.Namespace+"/"+pod.Name)
		}))
	// Everything the handlers (ListPodWorkers) and the other managers
	// reach is built here, before Run starts a goroutine.
	workersCtx, stopWorkers := context.WithCancel(context.Background())
	l.stopWorkers = stopWorkers
	l.workers = podworkers.New(workersCtx, l, log, opts.ResyncPeriod, podworkers.WithMetrics(opts.Metrics))
	l.store = desired.New(podcfg, l, log)
	l.podCache = pleg.NewCache[podruntime.PodStatus](nil, podCacheMaxRelists*opts.RelistPeriod)
	registerPodCacheMetrics(opts.Registerer, l.podCache)
	l.relister = pleg.New(rt, opts.RelistPeriod, log, l.workers.Trigger, pleg.WithMetrics(opts.Metrics), pleg.WithObserver(l.podCache))
	// A changed probe verdict resyncs the pod: a failed liveness probe
	// restarts the container, readiness is reported through the status.
	l.probes = prober.New(rt, log, func(uid types.UID) {
		if l.workers != nil {
			l.workers.Trigger(uid)
		}
	}, prober.WithRecorder(rm.Recorder()), prober.WithMetrics(opts.Metrics))
	rm.SetHealth(l.probes)
	if opts.Cgroups != nil {
		opts.Cgroups.SetActivePods(l.activePods)
	}
	rm.SetNodeInfo(func(ctx context.Context) ([]string, corev1.ResourceList) {
		var alloc corev1.ResourceList
		if n := l.getNode(ctx); n != nil {
			alloc = n.Status.Allocatable
		}
		return l.hostIPs(ctx), alloc
	})
	return l
}

// Run starts the loop's parts and runs until ctx ends; the pod workers
// stop with it.
func (l *Loop) Run(ctx context.Context) {
	defer context.AfterFunc(ctx, l.stopWorkers)()
	defer l.probes.Stop()
	var wg sync.WaitGroup
	wg.Add(5)
	go func() { defer wg.Done(); l.reports.Run(ctx) }()
	go func() { defer wg.Done(); l.store.Run(ctx) }()
	go func() { defer wg.Done(); l.relister.Run(ctx) }()
	go func() { defer wg.Done(); l.housekeeping(ctx) }()
	go func() { defer wg.Done(); l.containerGC(ctx) }()
	wg.Wait()
	l.stopWorkers()
	l.workers.Wait()
}

// Workers lists the pod workers (for ListPodWorkers).
func (l *Loop) Workers() []podworkers.Info {
	if l.workers == nil {
		return nil
	}
	return l.workers.List()
}

// --- desired.Handler: dispatch, as syncLoopIteration does ---

// Add admits a new pod, then starts its worker.
func (l *Loop) Add(pod *corev1.Pod) {
	l.observedOnWatch(pod)
	if pod.DeletionTimestamp != nil {
		l.Delete(pod)
		return
	}
	known, rejected, restarted := l.pods.added(pod.UID)
	if rejected {
		return
	}
	// A pod with a worker was admitted before (a killed pod's worker stays
	// after its admission record is dropped): it is not admitted again.
	if !known && !l.workers.Has(pod.UID) && !l.admit(pod) {
		return
	}
	if restarted {
		l.opts.Metrics.PodRestarted(podsource.IsStatic(pod))
		l.workers.Restart(pod)
		return
	}
	l.workers.Sync(pod)
}

// Update syncs a changed pod.
func (l *Loop) Update(pod *corev1.Pod) {
	l.observedOnWatch(pod)
	if pod.DeletionTimestamp != nil {
		l.Delete(pod)
		return
	}
	if !l.pods.updated(pod) {
		l.Add(pod)
		return
	}
	l.workers.Sync(pod)
}

// Delete starts graceful termination with the deletion grace period.
func (l *Loop) Delete(pod *corev1.Pod) {
	if l.pods.get(pod.UID).rejected {
		// Never ran: nothing to reclaim.
		l.reclaimed(context.Background(), pod)
		return
	}
	l.workers.Terminate(pod, pod.DeletionGracePeriodSeconds)
}

// Remove kills a pod that left its source.
func (l *Loop) Remove(pod *corev1.Pod) {
	l.pods.removed(pod.UID, l.opts.Clock.Now(), podsource.IsStatic(pod))
	// Only now is no report of the pod needed: a pod podsyncd killed
	// because it is being deleted stays in the API until statusd, which
	// may have missed its last status or its reclaim, deletes it.
	l.reports.Forget(pod.UID)
	l.failures.forget(stepStatusReport, string(pod.UID))
	l.workers.Remove(pod)
}

// Reconcile is a status-only change: statusd owns that; the pod start
// SLI ends when the watch shows the reported status.
func (l *Loop) Reconcile(pod *corev1.Pod) { l.observedOnWatch(pod) }

func (l *Loop) admit(pod *corev1.Pod) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// One admission decision (a new pod's or a resize's) at a time, so
	// two cannot both take the last room.
	l.allocMu.Lock()
	defer l.allocMu.Unlock()
	// Pods that already have runtime state (podsyncd restarted) are
	// adopted. Once a relist succeeded, only a pod it saw in the runtime
	// can have any, so a new pod costs no runtime read (at 5 pods/s the
	// reads were two CRI lists each).
	if held, known := l.relister.Holds(pod.UID); held || !known {
		if st, err := l.rm.GetPodStatus(ctx, pod.UID); err == nil && len(st.Sandboxes) > 0 {
			l.allocate(pod)
			l.pods.admit(pod)
			return true
		}
	}
	if podutil.IsTerminal(pod.Status.Phase) {
		// Finished before we saw it: never start it again.
		l.pods.reject(pod.UID)
		return false
	}
	node := l.getNode(ctx)
	running := l.activePods()
	for i, p := range running {
		running[i] = l.allocated(p)
	}
	// The kubelet's admit handlers in its order: eviction, sysctls,
	// predicates, AppArmor, node shutdown; the first refusal is the answer.
	res := admission.Result{Admit: true}
	if f := l.opts.AdmitPressure; f != nil {
		res.Admit, res.Reason, res.Message = f(pod)
	}
	if res.Admit {
		res = l.opts.Sysctls.Admit(pod)
	}
	if res.Admit {
		res = admission.Admit(pod, node, running)
		if res.Reason == admission.ReasonNodeAffinity && l.opts.FreshNode != nil {
			if fresh, err := l.opts.FreshNode(ctx); err != nil {
				l.log.Warn("node affinity refuses the pod and the Node cannot be read again", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			} else {
				l.nodeMu.Lock()
				l.node, l.nodeAt = fresh, l.opts.Clock.Now()
				l.nodeMu.Unlock()
				res = admission.Admit(pod, fresh, running)
			}
		}
	}
	if res.Admit {
		res = l.opts.AppArmor.Admit(pod)
	}
	if sd := l.opts.Shutdown; sd != nil && res.Admit {
		res.Admit, res.Reason, res.Message = sd.Admit()
	}
	if !res.Admit {
		l.reject(ctx, pod, res)
		return false
	}
	l.allocate(pod)
	l.pods.admit(pod)
	return true
}

// reject is the kubelet's rejectPod: a Warning event with the handler's
// reason and message, the pod Failed with that reason and the message
// after "Pod was rejected: ", and the rejection counted by reason.
func (l *Loop) reject(ctx context.Context, pod *corev1.Pod, res admission.Result) {
	l.log.Info("pod rejected", "pod", pod.Namespace+"/"+pod.Name, "reason", res.Reason, "message", res.Message)
	l.pods.reject(pod.UID)
	if rec := l.rm.Recorder(); rec != nil {
		rec.Event(pod, corev1.EventTypeWarning, res.Reason, res.Message)
	}
	st := admission.RejectedStatus(pod, res)
	l.report(ctx, pod, &st)
	l.opts.Metrics.AdmissionRejected(res.Reason)
}

// getNode returns this node's Node from nodestatusd, cached for 10 s; nil
// when nodestatusd cannot say (admission then checks nothing node-specific).
func (l *Loop) getNode(ctx context.Context) *corev1.Node {
	l.nodeMu.Lock()
	if l.node != nil && l.opts.Clock.Since(l.nodeAt) < 10*time.Second {
		n := l.node
		l.nodeMu.Unlock()
		return n
	}
	l.nodeMu.Unlock()
	if l.nodes == nil {
		return nil
	}
	resp, err := l.nodes.GetNode(ctx, &nodestatusv1.GetNodeRequest{})
	if err != nil {
		l.log.Debug("nodestatusd has no node yet", "err", err)
		return nil
	}
	n := &corev1.Node{}
	if err := n.Unmarshal(resp.Node); err != nil {
		return nil
	}
	l.nodeMu.Lock()
	l.node, l.nodeAt = n, l.opts.Clock.Now()
	l.nodeMu.Unlock()
	return n
}

func (l *Loop) hostIPs(ctx context.Context) []string {
	n := l.getNode(ctx)
	if n == nil {
		return nil
	}
	var out []string
	for _, t := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			if a.Type == t {
				out = append(out, a.Address)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return out
}

// --- podworkers.Handler ---

// SyncPod runs the runtime actions for a pod and reports its status.
func (l *Loop) SyncPod(ctx context.Context, spec *corev1.Pod) (bool, time.Duration, error) {
	// The runtime runs, and the status shows, the allocated resources; a
	// resize of the spec is admitted (or left pending) first.
	l.handleResize(ctx, spec)
	pod := l.allocated(spec)
	prev := l.lastStatus(pod.UID)
	st, err := l.cachedPodStatus(ctx, pod.UID)
	if err != nil {
		return false, 0, err
	}
	l.resizeProgress(pod, st, nil)
	pre := l.generate(ctx, pod, st, false)
	if podutil.IsTerminal(pre.Phase) {
		l.report(ctx, pod, &pre)
		return true, 0, nil
	}
	// A new spec's generation is reported before acting on it, as the
	// kubelet sets the status at the start of every sync: a slow action
	// (an image pull, a container's grace period) does not hold back
	// observedGeneration.
	if last := l.lastStatus(pod.UID); last == nil || last.ObservedGeneration != pre.ObservedGeneration {
		l.report(ctx, pod, &pre)
	}
	if err := l.ensureCgroup(pod); err != nil {
		return false, 0, err
	}
	actx, actions := podruntime.TrackActions(ctx)
	res := l.rm.SyncPod(actx, pod, st)
	started := pre.StartTime
	// A sync that changed nothing in the runtime reports from what it read.
	st2, err := st, error(nil)
	if actions() > 0 {
		st2, err = l.podStatus(ctx, pod.UID)
	}
	if err == nil {
		l.resizeProgress(pod, st2, res.ResizeError)
		l.probes.Sync(pod, st2)
		post := l.generate(ctx, pod, st2, false)
		l.observeStart(pod, prev, &pre, &post)
		l.report(ctx, pod, &post)
		started = post.StartTime
	}
	return false, l.untilDeadline(pod, started, res.Requeue), res.Err()
}

// podCacheMaxRelists is how many relist periods after the last successful
// relist a cached pod status is still served (relists fail while the
// runtime does not answer).
const podCacheMaxRelists = 10

// podStatus reads the pod's runtime status and keeps it for the syncs that
// follow.
func (l *Loop) podStatus(ctx context.Context, uid types.UID) (*podruntime.PodStatus, error) {
	r := l.podCache.Begin(uid)
	st, err := l.rm.GetPodStatus(ctx, uid)
	if err == nil {
		l.podCache.Put(r, st)
	}
	return st, err
}

// cachedPodStatus is the pod's runtime status as last read while the
// relister has seen no change of the pod since, as the kubelet's pod
// workers read its pod cache; otherwise it reads it. The status is shared:
// callers must not change it.
func (l *Loop) cachedPodStatus(ctx context.Context, uid types.UID) (*podruntime.PodStatus, error) {
	if st, ok := l.podCache.Get(uid); ok {
		return st, nil
	}
	return l.podStatus(ctx, uid)
}

// SyncTerminatingPod stops the pod within its grace period.
func (l *Loop) SyncTerminatingPod(ctx context.Context, pod *corev1.Pod, grace *int64) error {
	l.probes.Remove(pod.UID)
	st, err := l.podStatus(ctx, pod.UID)
	if err != nil {
		return err
	}
	if err := l.rm.KillPod(ctx, pod, st, grace); err != nil {
		return err
	}
	if st, err = l.podStatus(ctx, pod.UID); err == nil {
		final := l.generate(ctx, l.allocated(pod), st, true)
		l.report(ctx, pod, &final)
	}
	l.retryDeferredResizes(pod.UID)
	return nil
}

// SyncTerminatedPod removes what is left once the pod is deleted or gone and
// tells statusd the pod's resources are reclaimed.
func (l *Loop) SyncTerminatedPod(ctx context.Context, pod *corev1.Pod, remove bool) error {
	if err := l.destroyCgroup(pod.UID); err != nil {
		return err
	}
	if !remove && pod.DeletionTimestamp == nil {
		return nil // finished but still wanted: keep the containers for logs
	}
	st, err := l.rm.GetPodStatus(ctx, pod.UID)
	if err != nil {
		return err
	}
	if err := l.rm.RemovePod(ctx, st); err != nil {
		return err
	}
	l.reclaimed(ctx, pod)
	if remove {
		l.pods.cleaningUp(pod.UID)
		l.podCache.Forget(pod.UID)
		if err := l.rm.Forget(pod.UID); err != nil {
			// The housekeeping's sweep of pod dirs retries it.
			l.log.Warn("could not remove the pod's dir", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		}
		l.opts.Startup.Forget(pod.UID)
		l.pods.cleanedUp(pod.UID)
		l.retryDeferredResizes(pod.UID)
		if a := l.opts.Allocation; a != nil {
			if err := a.Remove(pod.UID); err != nil {
				l.log.Warn("could not drop the pod's allocation", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			}
		}
	}
	return nil
}

func (l *Loop) generate(ctx context.Context, pod *corev1.Pod, st *podruntime.PodStatus, terminal bool) corev1.PodStatus {
	now := l.opts.Clock.Now()
	out := podstatus.Generate(podstatus.Input{
		Pod: pod, Runtime: st, Reasons: l.rm.Reasons(pod.UID), ContainerID: l.rm.ContainerID,
		Terminal: terminal, HostIPs: l.hostIPs(ctx), Now: now, Previous: l.lastStatus(pod.UID),
		Probes: l.probes, ResizeConditions: l.resizeConditions(pod), RecursiveReadOnly: l.rm.SupportsRecursiveReadOnlyMounts(pod),
	})
	l.applyEviction(pod.UID, &out, now)
	l.applyShutdown(pod.UID, &out, now)
	l.deadlineEvent(pod, &out)
	return out
}

func (l *Loop) lastStatus(uid types.UID) *corev1.PodStatus { return l.pods.get(uid).last }

// report hands statusd a pod's status (statusreport resends it until
// statusd takes it, and holds back one statusd refused as invalid until it
// changes); a failure is said once per pod until a report of it succeeds
// again (failures).
func (l *Loop) report(ctx context.Context, pod *corev1.Pod, st *corev1.PodStatus) {
	l.pods.reported(pod.UID, st)
	if l.opts.Startup != nil {
		reported := *pod
		reported.Status = *st
		l.opts.Startup.StatusUpdated(&reported)
	}
	l.reports.Status(ctx, pod, st)
}

// reclaimed tells statusd the pod's resources are released (resent until
// statusd takes it, after any status of the pod it has not taken).
func (l *Loop) reclaimed(ctx context.Context, pod *corev1.Pod) { l.reports.Reclaimed(ctx, pod) }

// --- housekeeping ---

func (l *Loop) housekeeping(ctx context.Context) {
	t := time.NewTicker(l.opts.HousekeepingPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !l.store.Synced() || !l.sourcesReady(ctx) {
			continue
		}
		l.cleanup(ctx)
		l.countPods()
	}
}

// evictedReason is the pod status reason of an evicted pod.
const evictedReason = "Evicted"

// applyEviction turns st into an evicted pod's status when podsyncd evicted it.
func (l *Loop) applyEviction(uid types.UID, st *corev1.PodStatus, now time.Time) {
	ev := l.pods.get(uid).evicted
	if ev == nil {
		return
	}
	st.Phase, st.Reason, st.Message = corev1.PodFailed, evictedReason, ev.message
	if ev.condition {
		setDisruptionTarget(st, ev.message, now)
	}
}

// applyShutdown turns st into the status of a pod the node shutdown
// manager stopped: Failed unless it Succeeded, the manager's reason and
// message, a DisruptionTarget condition (the kubelet's killPods).
func (l *Loop) applyShutdown(uid types.UID, st *corev1.PodStatus, now time.Time) {
	if !l.pods.get(uid).shutdownKilled {
		return
	}
	if st.Phase != corev1.PodSucceeded {
		st.Phase = corev1.PodFailed
	}
	st.Reason, st.Message = nodeshutdown.ReasonTerminated, nodeshutdown.MessageTerminated
	setDisruptionTarget(st, nodeshutdown.MessageTerminated, now)
}

// setDisruptionTarget puts the kubelet's DisruptionTarget condition
// (reason TerminationByKubelet) with msg on st, keeping its transition time
// if it was already True.
func setDisruptionTarget(st *corev1.PodStatus, msg string, now time.Time) {
	cond := corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: corev1.PodReasonTerminationByKubelet,
		Message: msg, LastTransitionTime: metav1.NewTime(now), ObservedGeneration: st.ObservedGeneration,
	}
	for i := range st.Conditions {
		if st.Conditions[i].Type == corev1.DisruptionTarget {
			if st.Conditions[i].Status == corev1.ConditionTrue {
				cond.LastTransitionTime = st.Conditions[i].LastTransitionTime
			}
			st.Conditions[i] = cond
			return
		}
	}
	st.Conditions = append(st.Conditions, cond)
}

// KillPod stops a pod for the node shutdown within grace seconds (the
// node shutdown manager's kill): it ends as applyShutdown says and its
// restart policy does not bring it back. The channel closes once its
// containers have stopped.
func (l *Loop) KillPod(pod *corev1.Pod, grace int64) <-chan struct{} {
	l.pods.killForShutdown(pod.UID)
	return l.workers.Kill(pod, &grace)
}

func (l *Loop) sourcesReady(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := l.podcfg.SourcesReady(cctx, &podconfigv1.SourcesReadyRequest{})
	return err == nil && resp.AllReady
}

// cleanup kills runtime pods nobody wants and drops orphaned statuses.
// When the runtime cannot be listed it does nothing this time; each step's
// failures are said once per change and counted (failures).
func (l *Loop) cleanup(ctx context.Context) {
	// The pod dirs are listed before the store is read: a dir is made only
	// by a sync of a pod already in the store, so no pod that is wanted can
	// have a dir missing from want.
	dirs, dirErr := l.podDirs()
	want := map[types.UID]bool{}
	for _, p := range l.store.Pods() {
		want[p.UID] = true
	}
	l.readdCleaned()
	l.podCache.Retain(func(uid types.UID) bool { return want[uid] || l.workers.Has(uid) })
	sbs, cs, err := l.listRuntime(ctx)
	l.failures.observe(ctx, stepListRuntime, "", err)
	if err != nil {
		return
	}
	present := map[types.UID]bool{}
	for _, sb := range sbs {
		if uid := types.UID(sb.Labels[podruntime.LabelPodUID]); uid != "" {
			present[uid] = true
		}
	}
	for _, c := range cs {
		if uid := types.UID(c.Labels[podruntime.LabelPodUID]); uid != "" {
			present[uid] = true
		}
	}
	var errs []error
	for uid := range present {
		if want[uid] || l.workers.Has(uid) {
			continue
		}
		errs = append(errs, l.removeOrphan(ctx, uid))
	}
	l.failures.observe(ctx, stepOrphanedPods, "", errors.Join(errs...))
	l.failures.observe(ctx, stepOrphanedPodDirs, "", errors.Join(dirErr, l.removeOrphanedPodDirs(dirs, want, present)))
	if a := l.opts.Allocation; a != nil {
		l.failures.observe(ctx, stepOrphanedAllocations, "", a.RemoveOrphans(want))
	}
	if l.status != nil {
		// A pod that left its source keeps its status while its worker
		// still stops it: statusd keeps a static pod's mirror pod until
		// then.
		keep := make([]string, 0, len(want))
		for uid := range want {
			keep = append(keep, string(uid))
		}
		for _, w := range l.workers.List() {
			if !want[w.UID] {
				keep = append(keep, string(w.UID))
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := l.status.RemoveOrphanedStatuses(cctx, &statusdv1.RemoveOrphanedStatusesRequest{KeepPodUids: keep})
		cancel()
		l.failures.observe(ctx, stepOrphanedStatuses, "", err)
	}
	l.cgroupHousekeeping(want, present)
}

// readdCleaned adds again the wanted pods whose worker removed them and
// exited: the source added the pod back (same UID) just as its worker was
// finishing, too late for the worker to restart it (the kubelet's
// housekeeping likewise starts the desired pods its pod workers do not
// know).
func (l *Loop) readdCleaned() {
	for _, p := range l.store.Pods() {
		if !l.pods.get(p.UID).cleaned || l.workers.Has(p.UID) {
			continue
		}
		l.log.Info("pod added back as its worker finished removing it; starting it again", "pod", p.Namespace+"/"+p.Name)
		l.Add(p)
	}
}

// listRuntime lists every sandbox and container.
func (l *Loop) listRuntime(ctx context.Context) ([]*runtimeapi.PodSandbox, []*runtimeapi.Container, error) {
	sbs, err := l.rt.ListPodSandbox(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("sandboxes: %w", err)
	}
	cs, err := l.rt.ListContainers(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("containers: %w", err)
	}
	return sbs, cs, nil
}

// removeOrphan kills and removes the runtime pod of uid, which no source
// wants and no worker owns.
func (l *Loop) removeOrphan(ctx context.Context, uid types.UID) error {
	st, err := l.rm.GetPodStatus(ctx, uid)
	if err != nil {
		return fmt.Errorf("pod %s: status: %w", uid, err)
	}
	l.log.Info("killing orphaned pod", "uid", uid, "name", st.Namespace+"/"+st.Name)
	grace := int64(2)
	if err := l.rm.KillPod(ctx, nil, st, &grace); err != nil {
		return fmt.Errorf("pod %s: kill: %w", uid, err)
	}
	if err := l.rm.RemovePod(ctx, st); err != nil {
		return fmt.Errorf("pod %s: remove: %w", uid, err)
	}
	return nil
}

// podDirs lists the pods that have a dir under the data dir.
func (l *Loop) podDirs() ([]types.UID, error) {
	v := l.rm.Volumes()
	if v == nil {
		return nil, nil
	}
	uids, err := v.PodUIDs()
	if err != nil {
		return nil, fmt.Errorf("list pod dirs: %w", err)
	}
	return uids, nil
}

// removeOrphanedPodDirs removes the dir of each pod that no source wants,
// no worker owns and the runtime no longer holds, as the kubelet's
// cleanupOrphanedPodDirs does: a dir that SyncTerminatedPod could not
// remove, or one a restart left between removing the pod's containers and
// its dir, is not kept forever.
func (l *Loop) removeOrphanedPodDirs(dirs []types.UID, want, present map[types.UID]bool) error {
	var errs []error
	for _, uid := range dirs {
		if want[uid] || present[uid] || l.workers.Has(uid) {
			continue
		}
		if err := l.rm.Forget(uid); err != nil {
			errs = append(errs, err)
			continue
		}
		l.log.Info("removed the dir of a pod that is gone", "uid", uid)
	}
	return errors.Join(errs...)
}

// containerGC runs the container garbage collector every
// ContainerGCPeriod, as the kubelet's StartGarbageCollection does.
func (l *Loop) containerGC(ctx context.Context) {
	if l.opts.ContainerGC == nil {
		return
	}
	t := time.NewTicker(l.opts.ContainerGCPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, err := l.opts.ContainerGC.GarbageCollect(ctx, l.podGone(ctx))
		if ctx.Err() == nil {
			l.gcMetrics.pass(res, err)
		}
		l.failures.observe(ctx, stepContainerGC, "", err)
		if res.Containers+res.Sandboxes+res.LogDirs > 0 {
			l.log.Info("container garbage collection", "containers", res.Containers, "sandboxes", res.Sandboxes, "podLogDirs", res.LogDirs)
		}
	}
}

// podGone is the kubelet's ShouldPodContentBeRemoved for one GC pass: a pod
// is gone when no source wants it and it has no pod worker, judged only
// once every source has been seen (before that, nothing is gone).
func (l *Loop) podGone(ctx context.Context) containergc.Gone {
	if !l.store.Synced() || !l.sourcesReady(ctx) {
		return func(types.UID) bool { return false }
	}
	want := map[types.UID]bool{}
	for _, p := range l.store.Pods() {
		want[p.UID] = true
	}
	return func(uid types.UID) bool { return !want[uid] && !l.workers.Has(uid) }
}
