package podruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/internal/podutil"
	"github.com/microlet/microlet/services/podsyncd/internal/containerlogs"
	"github.com/microlet/microlet/services/podsyncd/internal/dns"
	"github.com/microlet/microlet/services/podsyncd/internal/envvars"
	"github.com/microlet/microlet/services/podsyncd/internal/events"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
	"github.com/microlet/microlet/services/podsyncd/internal/pullmanager"
	"github.com/microlet/microlet/services/podsyncd/internal/pullsecrets"
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
	crash *flowcontrol.Backoff
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
		rt:      rt,
		img:     img,
		opts:    opts,
		log:     opts.Log,
		crash:   flowcontrol.NewFakeBackOff(opts.BackoffInitial, opts.BackoffMax, opts.Clock),
		pulls:   flowcontrol.NewFakeBackOff(opts.ImagePullBackoffInitial, opts.ImagePullBackoffMax, opts.Clock),
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

// Forget drops what the manager remembers about a pod and its volume dirs.
func (m *Manager) Forget(uid types.UID) {
	m.mu.Lock()
	delete(m.reasons, uid)
	m.mu.Unlock()
	if m.opts.Volumes != nil {
		if err := m.opts.Volumes.Cleanup(uid); err != nil {
			m.log.Warn("could not remove pod volumes", "uid", uid, "err", err)
		}
	}
}

// Actions is what SyncPod must do for a pod (the kubelet's podActions).
type Actions struct {
	// KillPod stops everything and (with CreateSandbox) starts over.
	KillPod bool
	// CreateSandbox creates a new sandbox with SandboxAttempt.
	CreateSandbox  bool
	SandboxID      string
	SandboxAttempt uint32
	// NextInit is the index of the init container to start next, -1 for none.
	NextInit int
	// RestartSidecars lists the restartable init containers of an
	// initialized pod to start again (exited, or killed for a failed probe
	// or a changed spec); they start before the app containers.
	RestartSidecars []int
	// InitFailed is set when an init container failed and the pod may not retry.
	InitFailed bool
	// Start lists the indexes of regular containers to start.
	Start []int
	// StartEphemeral lists the indexes of ephemeral containers to start.
	StartEphemeral []int
	// Kill maps container IDs to kill to the reason.
	Kill map[string]string
	// KillGrace overrides the grace period of some kills (a probe's
	// terminationGracePeriodSeconds).
	KillGrace map[string]*int64
	// Resize lists the in-place updates of running containers by resource
	// (memory, CPU), decreases before increases.
	Resize map[corev1.ResourceName][]ContainerUpdate
	// UpdatePodResources is set when a container restarts for a resize: the
	// pod cgroup still has to follow.
	UpdatePodResources bool
}

// restartAllowed says whether a container that exited with code may start again.
func restartAllowed(pod *corev1.Pod, c *corev1.Container, exitCode int32) bool {
	if c.RestartPolicy != nil {
		switch *c.RestartPolicy {
		case corev1.ContainerRestartPolicyAlways:
			return true
		case corev1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case corev1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}

// ComputePodActions compares the pod's spec with its runtime state.
func (m *Manager) ComputePodActions(pod *corev1.Pod, st *PodStatus) Actions {
	a := Actions{NextInit: -1, Kill: map[string]string{}}
	sb := st.ReadySandbox()
	hostNet := pod.Spec.HostNetwork
	switch {
	case sb == nil:
		a.CreateSandbox = true
		a.KillPod = len(st.Running()) > 0 || len(st.Sandboxes) > 0
		if len(st.Sandboxes) > 0 {
			a.SandboxAttempt = st.Sandboxes[0].Attempt + 1
		}
	case sb.HostNet != hostNet:
		a.CreateSandbox, a.KillPod = true, true
		a.SandboxAttempt = sb.Attempt + 1
	default:
		a.SandboxID = sb.ID
	}
	if a.CreateSandbox {
		// A new sandbox after the pod already ran to completion is not wanted.
		if len(st.Sandboxes) > 0 && pod.Spec.RestartPolicy != corev1.RestartPolicyAlways && allRegularDone(pod, st) {
			a.CreateSandbox = false
			a.KillPod = len(st.Running()) > 0
			return a
		}
		if len(pod.Spec.InitContainers) > 0 {
			a.NextInit = 0
		} else {
			for i := range pod.Spec.Containers {
				a.Start = append(a.Start, i)
			}
		}
		return a
	}

	// Ephemeral containers start even while init containers run, and only
	// once: any instance in the runtime, whatever its state, means started.
	for i := range pod.Spec.EphemeralContainers {
		if st.Latest(pod.Spec.EphemeralContainers[i].Name) == nil {
			a.StartEphemeral = append(a.StartEphemeral, i)
		}
	}

	// Init containers (upstream's computeInitContainerActions): regular
	// ones run to completion one at a time, in order. A sidecar (restartable
	// init container) must be running and started (its startup probe passed)
	// before the next init container or any app container starts, and is kept
	// running: restarted when it exits, fails its liveness or startup probe,
	// or its spec changes. Once an app container is created or running the
	// pod is initialized: finished init containers are not looked at again
	// and a restarting sidecar no longer holds the app containers back. Only
	// exited app containers (say, of a sandbox before a reboot) do not count.
	initialized := false
	for i := range pod.Spec.Containers {
		if cs := st.Latest(pod.Spec.Containers[i].Name); cs != nil && (cs.State == StateRunning || cs.State == StateCreated) {
			initialized = true
			break
		}
	}
	initDone := true
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cs := st.Latest(c.Name)
		if podutil.IsSidecar(c) {
			start := cs == nil || cs.State == StateExited || cs.State == StateCreated
			if cs != nil && cs.State == StateRunning {
				if cs.Hash != HashContainer(c) {
					a.Kill[cs.ID] = fmt.Sprintf("Init container %s definition changed", c.Name)
					start = true
				} else if probe, grace, failed := m.failedProbe(c, cs.ID); failed {
					a.Kill[cs.ID] = fmt.Sprintf("Init container %s failed %s probe", c.Name, probe)
					if grace != nil {
						if a.KillGrace == nil {
							a.KillGrace = map[string]*int64{}
						}
						a.KillGrace[cs.ID] = grace
					}
					start = true
				} else if !m.computeResize(pod, c, true, cs, &a) {
					start = true // its resizePolicy asks for a restart
				}
			}
			if initialized {
				if start {
					a.RestartSidecars = append(a.RestartSidecars, i)
				}
				continue
			}
			if start {
				initDone = false
				a.NextInit = i
				break
			}
			if cs.State != StateRunning || !m.started(c, cs.ID) {
				initDone = false // wait for its startup probe
				break
			}
			continue
		}
		if initialized {
			continue
		}
		if cs == nil {
			initDone = false
			a.NextInit = i
			break
		}
		if cs.State == StateRunning || cs.State == StateCreated {
			initDone = false
			break
		}
		if cs.State == StateExited && cs.ExitCode == 0 {
			continue
		}
		initDone = false
		if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
			// The pod is done: nothing more starts in it.
			a.InitFailed = true
			a.StartEphemeral = nil
		} else {
			a.NextInit = i
		}
		break
	}
	if !initDone {
		return a
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cs := st.Latest(c.Name)
		switch {
		case cs == nil:
			a.Start = append(a.Start, i)
		case cs.State == StateRunning:
			if cs.Hash != HashContainer(c) {
				// Restarted whatever the restart policy, and the kill
				// message says so, as the kubelet's does.
				a.Kill[cs.ID] = fmt.Sprintf("Container %s definition changed, will be restarted", c.Name)
				a.Start = append(a.Start, i)
			} else if probe, grace, failed := m.failedProbe(c, cs.ID); failed {
				a.Kill[cs.ID] = fmt.Sprintf("Container %s failed %s probe", c.Name, probe)
				if grace != nil {
					if a.KillGrace == nil {
						a.KillGrace = map[string]*int64{}
					}
					a.KillGrace[cs.ID] = grace
				}
				// A killed container exits non-zero: OnFailure restarts it
				// too, and the kill message says so, as the kubelet's does.
				if restartAllowed(pod, c, 137) {
					a.Kill[cs.ID] += ", will be restarted"
					a.Start = append(a.Start, i)
				}
			} else if !m.computeResize(pod, c, false, cs, &a) {
				// Its resizePolicy asks for a restart, whatever the pod's
				// restart policy.
				a.Start = append(a.Start, i)
			}
		case cs.State == StateExited:
			if restartAllowed(pod, c, cs.ExitCode) {
				a.Start = append(a.Start, i)
			}
		case cs.State == StateCreated:
			// Created but never started (e.g. start failed): retry the start.
			a.Start = append(a.Start, i)
		}
	}
	return a
}

func allRegularDone(pod *corev1.Pod, st *PodStatus) bool {
	for i := range pod.Spec.Containers {
		cs := st.Latest(pod.Spec.Containers[i].Name)
		if cs == nil || cs.State != StateExited || restartAllowed(pod, &pod.Spec.Containers[i], cs.ExitCode) {
			return false
		}
	}
	return true
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

func nameOf(st *PodStatus, id string) string {
	for _, c := range st.Containers {
		if c.ID == id {
			return c.Name
		}
	}
	return ""
}

func podRef(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

// backoffKey is stable across restarts of the same container spec.
func backoffKey(pod *corev1.Pod, c *corev1.Container) string {
	return string(pod.UID) + "_" + c.Name + "_" + HashContainer(c)
}

func (m *Manager) startOne(ctx context.Context, pod *corev1.Pod, c *corev1.Container, kind containerKind, st *PodStatus, sandboxID string, sbConfig *runtimeapi.PodSandboxConfig, res *SyncResult) {
	prev := st.Latest(c.Name)
	restarts := 0
	if prev != nil {
		restarts = prev.Attempt + 1
		if prev.State == StateExited {
			key := backoffKey(pod, c)
			if m.crash.IsInBackOffSince(key, prev.FinishedAt) {
				wait := m.crash.Get(key)
				msg := fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", wait, c.Name, pod.Name, pod.Namespace, pod.UID)
				m.opts.Recorder.Eventf(events.ContainerRef(pod, c), corev1.EventTypeWarning, events.BackOff,
					"Back-off restarting failed container %s in pod %s_%s(%s)", c.Name, pod.Name, pod.Namespace, pod.UID)
				m.setReason(pod.UID, c.Name, &Reason{ReasonCrashLoopBackOff, msg})
				res.requeue(prev.FinishedAt.Add(wait).Sub(m.opts.Clock.Now()) + 100*time.Millisecond)
				return
			}
			m.crash.Next(key, prev.FinishedAt)
		}
		if prev.State == StateCreated {
			restarts = prev.Attempt
			// Remove the never-started instance before creating the next one.
			_ = m.rt.RemoveContainer(ctx, prev.ID)
		}
	}
	// Past the back-off, an attempt counts as a start; a failure counts
	// with its error code, the reason the container waits with.
	label := kind.metricLabel()
	m.opts.Metrics.ContainerStarting(label)
	code := ""
	defer func() {
		if code != "" {
			m.opts.Metrics.ContainerFailed(label, code)
		}
	}()
	imageRef, err := m.ensureImage(ctx, pod, c)
	if err != nil {
		code = ReasonErrImagePull
		if r, ok := m.Reasons(pod.UID)[c.Name]; ok {
			code = r.Reason
			m.containerEvent(pod, c, "", corev1.EventTypeWarning, events.Failed, "Error: "+r.Reason)
		}
		res.fail(err)
		return
	}
	imageVols, err := m.imageVolumes(ctx, pod, c)
	if err != nil {
		code = ReasonErrImagePull
		if r, ok := m.Reasons(pod.UID)[c.Name]; ok {
			code = r.Reason
			m.containerEvent(pod, c, "", corev1.EventTypeWarning, events.Failed, "Error: "+r.Reason)
		}
		res.fail(err)
		return
	}
	target, err := pidTarget(pod, c, kind, st)
	if err != nil {
		code = ReasonCreateConfigError
		m.containerEvent(pod, c, "", corev1.EventTypeWarning, events.Failed, "Error: "+err.Error())
		m.setReason(pod.UID, c.Name, &Reason{ReasonCreateConfigError, err.Error()})
		res.fail(err)
		return
	}
	cfg, err := m.containerConfig(ctx, pod, c, kind, restarts, imageRef, sandboxID, target, imageVols)
	if err != nil {
		code = ReasonCreateConfigError
		m.containerEvent(pod, c, "", corev1.EventTypeWarning, events.Failed, "Error: "+err.Error())
		m.setReason(pod.UID, c.Name, &Reason{ReasonCreateConfigError, err.Error()})
		res.fail(err)
		return
	}
	createdID, err := m.rt.CreateContainer(ctx, sandboxID, cfg, sbConfig)
	if err != nil {
		code = ReasonCreateContainerError
		m.containerEvent(pod, c, "", corev1.EventTypeWarning, events.Failed, "Error: "+grpcMessage(err))
		m.setReason(pod.UID, c.Name, &Reason{ReasonCreateContainerError, err.Error()})
		res.fail(fmt.Errorf("create container %s: %w", c.Name, err))
		return
	}
	m.containerEvent(pod, c, createdID, corev1.EventTypeNormal, events.Created, "Container created")
	m.recordActuated(pod, c, kind)
	if err := m.rt.StartContainer(ctx, createdID); err != nil {
		code = ReasonRunContainerError
		m.containerEvent(pod, c, createdID, corev1.EventTypeWarning, events.Failed, "Error: "+grpcMessage(err))
		m.setReason(pod.UID, c.Name, &Reason{ReasonRunContainerError, err.Error()})
		res.fail(fmt.Errorf("start container %s: %w", c.Name, err))
		return
	}
	m.setReason(pod.UID, c.Name, nil)
	if kind == kindInit && !podutil.IsSidecar(c) {
		m.opts.Startup.InitContainerStarted(pod.UID, m.opts.Clock.Now())
	}
	m.containerEvent(pod, c, createdID, corev1.EventTypeNormal, events.Started, "Container started")
	if err := containerlogs.Link(m.opts.LogSymlinkDir, pod.Name, pod.Namespace, c.Name, createdID,
		filepath.Join(sbConfig.GetLogDirectory(), cfg.GetLogPath())); err != nil {
		m.log.Warn("container log symlink", "pod", podRef(pod), "container", c.Name, "err", err)
	}
	m.log.Info("started container", "pod", podRef(pod), "container", c.Name, "id", createdID, "restarts", restarts)
	if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
		if msg, err := m.runHandler(ctx, pod, c, createdID, c.Lifecycle.PostStart, 0); err != nil {
			m.log.Warn("postStart hook failed; killing container", "pod", podRef(pod), "container", c.Name, "err", err)
			m.containerEvent(pod, c, createdID, corev1.EventTypeWarning, events.FailedPostStartHook, "PostStartHook failed")
			m.setReason(pod.UID, c.Name, &Reason{ReasonPostStartHookError, msg})
			code = ReasonPostStartHookError
			_ = m.killContainer(ctx, pod, createdID, c.Name, "FailedPostStartHook", nil)
			res.fail(fmt.Errorf("postStart hook of %s: %w", c.Name, err))
		}
	}
}

// pidTarget is the runtime ID of the container whose process namespace an
// ephemeral container with targetContainerName shares: the target's newest
// instance, as upstream takes it; the runtime refuses one that is not
// running. "" when there is no target.
func pidTarget(pod *corev1.Pod, c *corev1.Container, kind containerKind, st *PodStatus) (string, error) {
	if kind != kindEphemeral {
		return "", nil
	}
	for i := range pod.Spec.EphemeralContainers {
		ec := &pod.Spec.EphemeralContainers[i]
		if ec.Name != c.Name || ec.TargetContainerName == "" {
			continue
		}
		t := st.Latest(ec.TargetContainerName)
		if t == nil {
			return "", fmt.Errorf("unable to find target container %s", ec.TargetContainerName)
		}
		return t.ID, nil
	}
	return "", nil
}

// ensureImage pulls the image as imagePullPolicy says.
func (m *Manager) ensureImage(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (string, error) {
	return m.ensure(ctx, pod, c, events.ContainerRef(pod, c), c.Image, c.ImagePullPolicy)
}

// ensure pulls image as policy says ("" is IfNotPresent) with the pod's
// credentials, recording the pull's events on ref and a failure's reason
// (ErrImagePull, ImagePullBackOff, ErrImageNeverPull) on container c. It
// is the image's reference for the runtime.
//
// With pull records (PullRecords), a present image is used only when the
// verification policy lets the pod have it; otherwise the pod must pull it
// with its own credentials (IfNotPresent), or, with Never, is told the
// image is not present, as the kubelet does not to reveal it.
func (m *Manager) ensure(ctx context.Context, pod *corev1.Pod, c *corev1.Container, ref runtime.Object, image string, policy corev1.PullPolicy) (string, error) {
	spec := &runtimeapi.ImageSpec{Image: image}
	if policy == "" {
		policy = corev1.PullIfNotPresent
	}
	present := ""
	if policy != corev1.PullAlways {
		st, err := m.img.ImageStatus(ctx, spec, false)
		if err == nil && st.Image != nil {
			present = st.Image.Id
		}
	}
	creds := sync.OnceValue(func() []pullsecrets.Cred { return m.pullAuths(ctx, pod, image) })
	if present != "" {
		if m.opts.PullRecords == nil {
			m.opts.Recorder.Eventf(ref, corev1.EventTypeNormal, events.Pulled, "Container image %q already present on machine", image)
			return present, nil
		}
		mustPull, err := m.opts.PullRecords.MustAttemptImagePull(ctx, image, present,
			func() ([]kubeletv1beta1.ImagePullSecret, error) { return podSecrets(creds()), nil })
		if err != nil {
			m.setReason(pod.UID, c.Name, &Reason{ReasonErrImagePull, err.Error()})
			return "", err
		}
		if !mustPull {
			m.opts.Recorder.Eventf(ref, corev1.EventTypeNormal, events.Pulled, "Container image %q already present on machine and can be accessed by the pod", image)
			return present, nil
		}
	}
	if policy == corev1.PullNever {
		msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", image)
		m.opts.Recorder.Event(ref, corev1.EventTypeWarning, events.ErrImageNeverPull, msg)
		m.setReason(pod.UID, c.Name, &Reason{ReasonErrImageNeverPull, msg})
		return "", errors.New(msg)
	}
	key := "pull_" + string(pod.UID) + "_" + image
	now := m.opts.Clock.Now()
	if m.pulls.IsInBackOffSinceUpdate(key, now) {
		msg := fmt.Sprintf("Back-off pulling image %q", image)
		m.opts.Recorder.Event(ref, corev1.EventTypeNormal, events.BackOff, msg)
		m.setReason(pod.UID, c.Name, &Reason{ReasonImagePullBackOff, msg})
		return "", errors.New(msg)
	}
	if m.opts.PullRecords != nil {
		if err := m.opts.PullRecords.RecordPullIntent(image); err != nil {
			msg := fmt.Sprintf("Failed to record image pull intent for container image %q: %v", image, err)
			m.setReason(pod.UID, c.Name, &Reason{ReasonErrImagePull, msg})
			return "", errors.New(msg)
		}
	}
	m.opts.Recorder.Eventf(ref, corev1.EventTypeNormal, events.Pulling, "Pulling image %q", image)
	m.opts.Startup.PullStarted(pod.UID)
	imageRef, used, err := m.pull(ctx, spec, creds())
	if err == nil {
		m.opts.Startup.PullFinished(pod.UID)
	}
	if err != nil {
		if m.opts.PullRecords != nil {
			m.opts.PullRecords.RecordImagePullFailed(image)
		}
		m.pulls.Next(key, now)
		msg := fmt.Sprintf("Failed to pull image %q: %v", image, err)
		m.opts.Recorder.Event(ref, corev1.EventTypeWarning, events.Failed, msg)
		m.setReason(pod.UID, c.Name, &Reason{ReasonErrImagePull, msg})
		return "", errors.New(msg)
	}
	if m.opts.PullRecords != nil {
		m.opts.PullRecords.RecordImagePulled(image, imageRef, pulledWith(used))
	}
	m.pulls.Reset(key)
	m.opts.Recorder.Eventf(ref, corev1.EventTypeNormal, events.Pulled, "Successfully pulled image %q in %v (%v including waiting). Image size: %v bytes.",
		image, m.opts.Clock.Since(now).Truncate(time.Millisecond), m.opts.Clock.Since(now).Truncate(time.Millisecond), m.imageSize(ctx, imageRef))
	return imageRef, nil
}

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

// gracePeriod is the pod's termination grace: the deletion grace period when
// set, else the spec's, else 30 s; never below the kubelet's 2 s minimum.
func gracePeriod(pod *corev1.Pod, override *int64) int64 {
	g := int64(corev1.DefaultTerminationGracePeriodSeconds)
	switch {
	case override != nil:
		g = *override
	case pod != nil && pod.DeletionGracePeriodSeconds != nil:
		g = *pod.DeletionGracePeriodSeconds
	case pod != nil && pod.Spec.TerminationGracePeriodSeconds != nil:
		g = *pod.Spec.TerminationGracePeriodSeconds
	}
	if g < minGracePeriod {
		g = minGracePeriod
	}
	return g
}

func findContainer(pod *corev1.Pod, name string) *corev1.Container {
	if pod == nil {
		return nil
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			return (*corev1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		}
	}
	return nil
}

// killContainer runs the preStop hook (bounded by the grace period), then
// stops the container with what is left of it.
func (m *Manager) killContainer(ctx context.Context, pod *corev1.Pod, id, name, message string, grace *int64) error {
	g := gracePeriod(pod, grace)
	start := m.opts.Clock.Now()
	c := findContainer(pod, name)
	if c != nil {
		if message == "" {
			message = "Stopping container " + c.Name
		}
		m.containerEvent(pod, c, id, corev1.EventTypeNormal, events.Killing, message)
	}
	if c != nil && c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		hctx, cancel := context.WithTimeout(ctx, time.Duration(g)*time.Second)
		if _, err := m.runHandler(hctx, pod, c, id, c.Lifecycle.PreStop, time.Duration(g)*time.Second); err != nil {
			m.log.Warn("preStop hook failed", "pod", podRef(pod), "container", name, "err", err)
			m.containerEvent(pod, c, id, corev1.EventTypeWarning, events.FailedPreStopHook, "PreStopHook failed")
		}
		cancel()
		g -= int64(m.opts.Clock.Since(start).Seconds())
		if g < minGracePeriod {
			g = minGracePeriod
		}
	}
	if err := m.rt.StopContainer(ctx, id, g); err != nil {
		return fmt.Errorf("stop container %s (%s): %w", name, id, err)
	}
	return nil
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

// imageSize is a pulled image's size for the Pulled event (0 if unknown).
func (m *Manager) imageSize(ctx context.Context, ref string) uint64 {
	st, err := m.img.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: ref}, false)
	if err != nil || st.Image == nil {
		return 0
	}
	return st.Image.Size
}
