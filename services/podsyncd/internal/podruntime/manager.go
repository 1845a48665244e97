package podruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	criapi "k8s.io/cri-api/pkg/apis"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/internal/podutil"
	"github.com/microlet/microlet/services/podsyncd/internal/dns"
	"github.com/microlet/microlet/services/podsyncd/internal/envvars"
	"github.com/microlet/microlet/services/podsyncd/internal/events"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
	"github.com/microlet/microlet/services/podsyncd/internal/pullmanager"
	"github.com/microlet/microlet/services/podsyncd/internal/securitycontext"
	"github.com/microlet/microlet/services/podsyncd/internal/volumes"
)

// Waiting reasons, the kubelet's own strings.
const (
	ReasonCrashLoopBackOff     = "CrashLoopBackOff"
	ReasonErrImagePull         = "ErrImagePull"
	ReasonImagePullBackOff     = "ImagePullBackOff"
	ReasonErrImageNeverPull    = "ErrImageNeverPull"
	ReasonCreateConfigError    = "CreateContainerConfigError"
	ReasonCreateContainerError = "CreateContainerError"
	ReasonRunContainerError    = "RunContainerError"
	ReasonPostStartHookError   = "PostStartHookError"
)

// Backoff defaults of the kubelet: 10 s doubling to 5 min.
const (
	DefaultBackoffInitial = 10 * time.Second
	DefaultBackoffMax     = 5 * time.Minute
	// minGracePeriod is the least a container gets to stop (the kubelet's 2 s).
	minGracePeriod = 2
)

// Options configure a Manager.
type Options struct {
	// LogRoot is the directory under which pod log dirs are created.
	LogRoot string
	// RuntimeName prefixes container IDs in API statuses ("docker://<id>").
	RuntimeName string
	// BackoffInitial and BackoffMax bound CrashLoopBackOff (defaults 10 s, 5 min).
	BackoffInitial, BackoffMax time.Duration
	// ImagePullBackoffInitial and ImagePullBackoffMax bound ImagePullBackOff.
	ImagePullBackoffInitial, ImagePullBackoffMax time.Duration
	// Clock is injected for tests.
	Clock clock.Clock
	// Log is the logger.
	Log *slog.Logger
	// DNS gives sandboxes their resolver configuration and containers the
	// managed /etc/hosts; nil leaves both to the runtime.
	DNS *dns.Configurer
	// Services are the Services behind service-link variables; nil
	// (standalone) gives none.
	Services envvars.Services
	// Recorder records the kubelet's pod events; nil logs them.
	Recorder events.Recorder
	// Objects reads the ConfigMaps and Secrets pods refer to; nil (standalone)
	// makes every required reference a configuration error.
	Objects envvars.Source
	// Volumes sets up pod volumes; nil refuses pods that mount any.
	Volumes *volumes.Manager
	// Security holds the node's seccomp settings (profile root, default).
	Security securitycontext.Options
	// MemoryCapacity is the machine's memory in bytes, for the OOM score
	// adjustment of Burstable containers.
	MemoryCapacity int64
	// LogSymlinkDir gets a <pod>_<ns>_<container>-<id>.log symlink to each
	// started container's log, as the kubelet makes in /var/log/containers;
	// empty makes none.
	LogSymlinkDir string
	// Actuated records the resources given to each container; nil turns
	// in-place resize off (a resized container keeps its resources).
	Actuated ActuatedState
	// PodCgroup resizes pod cgroups around in-place container updates; nil
	// when pods have no cgroups of their own.
	PodCgroup PodCgroupResizer
	// CgroupParent names the pod's cgroup for its sandbox
	// (LinuxPodSandboxConfig.cgroup_parent); nil leaves it to the runtime.
	CgroupParent func(*corev1.Pod) string
	// Credentials are the node's image credentials, tried in order after
	// the pod's pull secrets: the docker config files, then the credential
	// provider plugins, as the kubelet's union keyring; none has none.
	Credentials []Credentials
	// PullRecords verifies a pod's credentials for images already present
	// (KubeletEnsureSecretPulledImages); nil lets every pod use them.
	PullRecords *pullmanager.Manager
	// Metrics counts sandbox and container starts and their failures
	// (kubelet_started_pods_total, kubelet_started_containers_total and
	// their _errors_total); nil counts nothing.
	Metrics *kubeletmetrics.Metrics
	// Startup is told of image pulls and init container runs, which the
	// pod start SLI leaves out; nil tracks nothing.
	Startup *kubeletmetrics.StartupTracker
	// RecursiveReadOnly says whether a runtime handler ("" the default)
	// makes recursive read-only mounts (runtimehandlers); nil: none does.
	RecursiveReadOnly func(handler string) bool
	// RuntimeHandler resolves a pod's runtimeClassName to the runtime
	// handler its sandbox runs with (runtimeclass); an error leaves the
	// sandbox uncreated. nil runs every pod with the default handler.
	RuntimeHandler func(*corev1.Pod) (string, error)
}

// Reason is a container's waiting reason remembered between syncs.
type Reason struct {
	Reason  string
	Message string
}

// Manager runs pods on a CRI runtime.
type Manager struct {
	rt    criapi.RuntimeService
	img   criapi.ImageManagerService
	opts  Options
	log   *slog.Logger
	crash *crashBackOff
	pulls *flowcontrol.Backoff

	mu      sync.Mutex
	reasons map[types.UID]map[string]Reason
	health  Health
	// nodeInfo gives the node's addresses and allocatable resources.
	nodeInfo func(context.Context) ([]string, corev1.ResourceList)
}

// SetNodeInfo installs the source of the node's addresses and allocatable
// resources (status.hostIP and resourceFieldRef of unset limits).
func (m *Manager) SetNodeInfo(f func(context.Context) ([]string, corev1.ResourceList)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nodeInfo = f
}

// Health tells the manager which running containers failed their liveness or
// startup probe and must be restarted (the prober implements it).
type Health interface {
	// FailedProbe names the probe the container failed ("liveness" or
	// "startup", for the kill message) and returns that probe's own
	// termination grace period (nil for the pod's).
	FailedProbe(c *corev1.Container, id string) (probe string, grace *int64, failed bool)
	// Started says whether a running container passed its startup probe
	// (true when it has none): a sidecar gates the next init container and
	// the app containers until then.
	Started(c *corev1.Container, id string) bool
}

// SetHealth installs the probe results; call it before the first SyncPod.
func (m *Manager) SetHealth(h Health) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.health = h
}

func (m *Manager) failedProbe(c *corev1.Container, id string) (string, *int64, bool) {
	m.mu.Lock()
	h := m.health
	m.mu.Unlock()
	if h == nil {
		return "", nil, false
	}
	return h.FailedProbe(c, id)
}

func (m *Manager) started(c *corev1.Container, id string) bool {
	m.mu.Lock()
	h := m.health
	m.mu.Unlock()
	if h == nil {
		return true
	}
	return h.Started(c, id)
}

// NewManager returns a manager over the given CRI services (cri-client's
// remote runtime and image services, whose request timeouts bound every
// call but image pulls).
func NewManager(rt criapi.RuntimeService, img criapi.ImageManagerService, opts Options) *Manager {
	if opts.BackoffInitial == 0 {
		opts.BackoffInitial = DefaultBackoffInitial
	}
	if opts.BackoffMax == 0 {
		opts.BackoffMax = DefaultBackoffMax
	}
	if opts.ImagePullBackoffInitial == 0 {
		opts.ImagePullBackoffInitial = DefaultBackoffInitial
	}
	if opts.ImagePullBackoffMax == 0 {
		opts.ImagePullBackoffMax = DefaultBackoffMax
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.RuntimeName == "" {
		opts.RuntimeName = "cri"
	}
	if opts.Recorder == nil {
		opts.Recorder = events.NewLog(opts.Log)
	}
	return &Manager{
		rt:      actionCounter{rt},
		img:     img,
		opts:    opts,
		log:     opts.Log,
		crash:   newCrashBackOff(opts.BackoffInitial, opts.BackoffMax, opts.Clock),
		pulls:   newPullBackOff(opts.ImagePullBackoffInitial, opts.ImagePullBackoffMax, opts.Clock),
		reasons: map[types.UID]map[string]Reason{},
	}
}

// ContainerID formats a runtime container ID for the API ("docker://<id>").
func (m *Manager) ContainerID(id string) string { return m.opts.RuntimeName + "://" + id }

// Reasons returns the remembered waiting reasons of a pod's containers.
func (m *Manager) Reasons(uid types.UID) map[string]Reason {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]Reason{}
	for k, v := range m.reasons[uid] {
		out[k] = v
	}
	return out
}

func (m *Manager) setReason(uid types.UID, name string, r *Reason) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r == nil {
		delete(m.reasons[uid], name)
		return
	}
	if m.reasons[uid] == nil {
		m.reasons[uid] = map[string]Reason{}
	}
	m.reasons[uid][name] = *r
}

// Forget drops what the manager remembers about a pod and removes its pod
// dir with its volumes. An error leaves the dir for the loop's housekeeping
// to retry.
func (m *Manager) Forget(uid types.UID) error {
	m.mu.Lock()
	delete(m.reasons, uid)
	m.mu.Unlock()
	m.crash.forget(uid)
	if m.opts.Volumes == nil {
		return nil
	}
	if err := m.opts.Volumes.Cleanup(uid); err != nil {
		return fmt.Errorf("pod %s: remove the pod dir: %w", uid, err)
	}
	return nil
}

// SyncResult reports what a SyncPod did.
type SyncResult struct {
	// Requeue asks for another sync after this long (a backoff expires), 0 for none.
	Requeue time.Duration
	// Errors met; the pod's next sync retries.
	Errors []error
	// ResizeError is set when an in-place resize failed.
	ResizeError *ResizeError
}

func (r *SyncResult) fail(err error) { r.Errors = append(r.Errors, err) }

func (r *SyncResult) requeue(d time.Duration) {
	if d > 0 && (r.Requeue == 0 || d < r.Requeue) {
		r.Requeue = d
	}
}

// Err joins the errors.
func (r *SyncResult) Err() error { return errors.Join(r.Errors...) }

// SyncPod makes the runtime match the pod.
func (m *Manager) SyncPod(ctx context.Context, pod *corev1.Pod, st *PodStatus) SyncResult {
	var res SyncResult
	// Volumes are set up (and API-backed ones refreshed) on every sync;
	// containers wait for them as upstream's do (FailedMount).
	if m.opts.Volumes != nil && len(pod.Spec.Volumes) > 0 {
		sbID := ""
		if sb := st.ReadySandbox(); sb != nil {
			sbID = sb.ID
		}
		if err := m.opts.Volumes.Setup(ctx, pod, m.podInfo(ctx, sbID)); err != nil {
			m.podEvent(pod, corev1.EventTypeWarning, events.FailedMount, err)
			if len(st.Running()) == 0 {
				res.fail(err)
				return res
			}
		}
	}
	a := m.ComputePodActions(pod, st)
	if a.CreateSandbox && len(st.Sandboxes) > 0 {
		m.opts.Recorder.Event(events.PodRef(pod), corev1.EventTypeNormal, events.SandboxChanged, "Pod sandbox changed, it will be killed and re-created.")
	}
	if a.KillPod {
		if err := m.KillPod(ctx, pod, st, nil); err != nil {
			res.fail(err)
			return res
		}
	}
	for id, why := range a.Kill {
		m.log.Info("killing container", "pod", podRef(pod), "container", id, "reason", why)
		if err := m.killContainer(ctx, pod, id, nameOf(st, id), why, a.KillGrace[id]); err != nil {
			res.fail(err)
		}
	}
	sandboxID := a.SandboxID
	if a.CreateSandbox {
		m.opts.Metrics.SandboxStarting()
		id, err := m.createSandbox(ctx, pod, a.SandboxAttempt)
		if err != nil {
			m.opts.Metrics.SandboxFailed()
			m.opts.Recorder.Eventf(events.PodRef(pod), corev1.EventTypeWarning, events.FailedCreatePodSandBox, "Failed to create pod sandbox: %v", err)
			res.fail(fmt.Errorf("create sandbox: %w", err))
			return res
		}
		sandboxID = id
		// The fresh sandbox is the pod's newest; the containers of the old
		// ones stay its history, as upstream's podStatus does: restart
		// counts (and with them runtime names and log files) go on, and an
		// ephemeral container that ran is not started again.
		st = &PodStatus{UID: pod.UID, Name: st.Name, Namespace: st.Namespace,
			Sandboxes: append([]SandboxStatus{{ID: id, Ready: true, Attempt: a.SandboxAttempt}}, st.Sandboxes...), Containers: st.Containers}
	}
	if sandboxID == "" {
		return res
	}
	sbConfig, err := m.sandboxConfig(pod, a.SandboxAttempt)
	if err != nil {
		res.fail(err)
		return res
	}
	// Ephemeral containers go first, as upstream's do, so a debugger starts
	// even when an init container cannot.
	for _, i := range a.StartEphemeral {
		c := (*corev1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		m.startOne(ctx, pod, c, kindEphemeral, st, sandboxID, sbConfig, &res)
	}
	if len(a.Resize) > 0 || a.UpdatePodResources {
		if err := m.doResize(ctx, pod, &a); err != nil {
			res.ResizeError = err
			res.fail(err)
		}
	}
	m.initTimes(pod, st)
	if a.NextInit >= 0 {
		c := &pod.Spec.InitContainers[a.NextInit]
		m.startOne(ctx, pod, c, kindInit, st, sandboxID, sbConfig, &res)
		return res
	}
	for _, i := range a.RestartSidecars {
		m.startOne(ctx, pod, &pod.Spec.InitContainers[i], kindInit, st, sandboxID, sbConfig, &res)
	}
	for _, i := range a.Start {
		m.startOne(ctx, pod, &pod.Spec.Containers[i], kindRegular, st, sandboxID, sbConfig, &res)
	}
	return res
}

// initTimes tells the startup tracker when the pod's init containers
// (not sidecars) finished, as the kubelet's SyncPod does.
func (m *Manager) initTimes(pod *corev1.Pod, st *PodStatus) {
	if m.opts.Startup == nil {
		return
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if podutil.IsSidecar(c) {
			continue
		}
		if cs := st.Latest(c.Name); cs != nil && cs.State == StateExited && !cs.FinishedAt.IsZero() {
			m.opts.Startup.InitContainerFinished(pod.UID, cs.FinishedAt)
		}
	}
}

func podRef(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

// KillPod stops every running container (preStop hooks first, within the
// grace period) and then the sandboxes. grace overrides the pod's own period.
// As upstream with sidecars: the app containers (and other init and
// ephemeral containers) stop first, together; then the sidecars one at a
// time in reverse spec order, so every preStop hook still reaches the
// sidecars, each with what is left of the grace period (at least the 2 s
// minimum).
func (m *Manager) KillPod(ctx context.Context, pod *corev1.Pod, st *PodStatus, grace *int64) error {
	start := m.opts.Clock.Now()
	var first, sidecars []ContainerStatus
	order := map[string]int{}
	if pod != nil {
		for i := range pod.Spec.InitContainers {
			if podutil.IsSidecar(&pod.Spec.InitContainers[i]) {
				order[pod.Spec.InitContainers[i].Name] = i
			}
		}
	}
	for _, c := range st.Running() {
		if _, ok := order[c.Name]; ok && c.Init {
			sidecars = append(sidecars, c)
		} else {
			first = append(first, c)
		}
	}
	sort.SliceStable(sidecars, func(i, j int) bool { return order[sidecars[i].Name] > order[sidecars[j].Name] })
	var wg sync.WaitGroup
	errs := make(chan error, len(st.Containers)+len(st.Sandboxes))
	for _, c := range first {
		wg.Add(1)
		go func(c ContainerStatus) {
			defer wg.Done()
			if err := m.killContainer(ctx, pod, c.ID, c.Name, "", grace); err != nil {
				errs <- err
			}
		}(c)
	}
	wg.Wait()
	for _, c := range sidecars {
		left := gracePeriod(pod, grace) - int64(m.opts.Clock.Since(start).Seconds())
		if left < minGracePeriod {
			left = minGracePeriod
		}
		if err := m.killContainer(ctx, pod, c.ID, c.Name, "", &left); err != nil {
			errs <- err
		}
	}
	for _, sb := range st.Sandboxes {
		if !sb.Ready {
			continue
		}
		if err := m.rt.StopPodSandbox(ctx, sb.ID); err != nil {
			errs <- fmt.Errorf("stop sandbox %s: %w", sb.ID, err)
		}
	}
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// RemovePod deletes every container and sandbox of a stopped pod.
func (m *Manager) RemovePod(ctx context.Context, st *PodStatus) error {
	var all []error
	for _, c := range st.Containers {
		if err := m.rt.RemoveContainer(ctx, c.ID); err != nil {
			all = append(all, err)
		}
	}
	for _, sb := range st.Sandboxes {
		if err := m.rt.RemovePodSandbox(ctx, sb.ID); err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// Recorder is the manager's event recorder (the prober records through it).
func (m *Manager) Recorder() events.Recorder { return m.opts.Recorder }

// Volumes is the pods' volume manager; nil when none was configured.
func (m *Manager) Volumes() *volumes.Manager { return m.opts.Volumes }

// containerEvent records an event on a container; the runtime's container
// ID in a message is replaced by the container's name so repeats aggregate,
// as the kubelet does.
func (m *Manager) containerEvent(pod *corev1.Pod, c *corev1.Container, id, eventtype, reason, message string) {
	if id != "" {
		message = strings.ReplaceAll(message, id, c.Name)
	}
	m.opts.Recorder.Event(events.ContainerRef(pod, c), eventtype, reason, message)
}

// podEvent records one event per joined error (one FailedMount per volume).
func (m *Manager) podEvent(pod *corev1.Pod, eventtype, reason string, err error) {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		m.opts.Recorder.Event(events.PodRef(pod), eventtype, reason, e.Error())
	}
}

// grpcMessage is a runtime error's message without the gRPC framing.
func grpcMessage(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
}
