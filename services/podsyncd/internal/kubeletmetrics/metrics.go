package kubeletmetrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/component-base/metrics"
)

// Label values of upstream's metrics.
const (
	// ContainerTypeContainer, ContainerTypeInit and ContainerTypeEphemeral
	// are container_type's values (kubelet_started_containers_total).
	ContainerTypeContainer = "container"
	ContainerTypeInit      = "init_container"
	ContainerTypeEphemeral = "ephemeral_container"

	// Pod worker operation_type values (kubelet_pod_worker_duration_seconds):
	// a new pod, a changed pod, a resync or runtime event, a kill, and the
	// final cleanup of a terminated pod.
	OpCreate     = "create"
	OpUpdate     = "update"
	OpSync       = "sync"
	OpKill       = "kill"
	OpTerminated = "terminated"

	// ImageGCAge and ImageGCSpace are kubelet_image_garbage_collected_total's reasons.
	ImageGCAge   = "age"
	ImageGCSpace = "space"

	// SignalEmptyDirFsLimit, SignalEphemeralPodFsLimit and
	// SignalEphemeralContainerFsLimit are the eviction_signal of a pod
	// evicted because an emptyDir outgrew its sizeLimit, the pod its
	// ephemeral-storage limit, or a container its own.
	SignalEmptyDirFsLimit           = "emptydirfs.limit"
	SignalEphemeralPodFsLimit       = "ephemeralpodfs.limit"
	SignalEphemeralContainerFsLimit = "ephemeralcontainerfs.limit"
)

// ContainerStates are the container_state values of
// kubelet_running_containers (the kubelet's container states).
var ContainerStates = []string{"created", "running", "exited", "unknown"}

// admissionReasons are the rejection reasons kubelet_admission_rejections_total
// counts by name (upstream's allow list keeps the label's cardinality low);
// other "OutOf..." reasons count as OutOfExtendedResources, the rest as Other.
var admissionReasons = map[string]bool{
	"AppArmor": true, "PodOSSelectorNodeLabelDoesNotMatch": true, "PodOSNotSupported": true,
	"InvalidNodeInfo": true, "InitContainerRestartPolicyForbidden": true, "SupplementalGroupsPolicyNotSupported": true,
	"UnexpectedAdmissionError": true, "UnknownReason": true, "UnexpectedPredicateFailureType": true,
	"OutOfcpu": true, "OutOfmemory": true, "OutOfephemeral-storage": true, "OutOfpods": true,
	"PodLevelResourcesNotSupported": true, "PodFeatureUnsupported": true,
	"node(s) had taints that the pod didn't tolerate": true, "Evicted": true, "SysctlForbidden": true,
	"TopologyAffinityError": true, "NodeShutdown": true, "VolumeAttachmentLimitExceeded": true,
}

// podStartupBuckets are upstream's buckets of the pod start histograms.
var podStartupBuckets = []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}

// Metrics is one set of the kubelet's metrics and the registries serving them.
type Metrics struct {
	kubelet metrics.KubeRegistry
	probes  metrics.KubeRegistry
	// start holds process_start_time_seconds, served beside the probes.
	start metrics.KubeRegistry

	nodeName                *metrics.GaugeVec
	cgroupVersion           *metrics.Gauge
	runningPods             *metrics.Gauge
	runningContainers       *metrics.GaugeVec
	desiredPods             *metrics.GaugeVec
	activePods              *metrics.GaugeVec
	restartedPods           *metrics.CounterVec
	podStart                *metrics.Histogram
	podStartSLI             *metrics.HistogramVec
	podStartTotal           *metrics.HistogramVec
	podWorker               *metrics.HistogramVec
	plegRelistDuration      *metrics.Histogram
	plegRelistInterval      *metrics.Histogram
	plegLastSeen            *metrics.Gauge
	evictions               *metrics.CounterVec
	preemptions             *metrics.CounterVec
	admissionRejections     *metrics.CounterVec
	startedPods             *metrics.Counter
	startedPodsErrors       *metrics.Counter
	startedContainers       *metrics.CounterVec
	startedContainersErrors *metrics.CounterVec
	imageGC                 *metrics.CounterVec
	shutdownStart           *metrics.Gauge
	shutdownEnd             *metrics.Gauge
	probeTotal              *metrics.CounterVec
	probeDuration           *metrics.HistogramVec
	runtimeOps              *metrics.CounterVec
	runtimeOpsDuration      *metrics.HistogramVec
	runtimeOpsErrors        *metrics.CounterVec
}

func gauge(name, help string) *metrics.Gauge {
	return metrics.NewGauge(&metrics.GaugeOpts{Subsystem: "kubelet", Name: name, Help: help, StabilityLevel: metrics.ALPHA})
}

func gaugeVec(name, help string, labels ...string) *metrics.GaugeVec {
	return metrics.NewGaugeVec(&metrics.GaugeOpts{Subsystem: "kubelet", Name: name, Help: help, StabilityLevel: metrics.ALPHA}, labels)
}

func counter(name, help string) *metrics.Counter {
	return metrics.NewCounter(&metrics.CounterOpts{Subsystem: "kubelet", Name: name, Help: help, StabilityLevel: metrics.ALPHA})
}

func counterVec(name, help string, labels ...string) *metrics.CounterVec {
	return metrics.NewCounterVec(&metrics.CounterOpts{Subsystem: "kubelet", Name: name, Help: help, StabilityLevel: metrics.ALPHA}, labels)
}

func histogram(name, help string, buckets []float64) *metrics.Histogram {
	return metrics.NewHistogram(&metrics.HistogramOpts{Subsystem: "kubelet", Name: name, Help: help, Buckets: buckets, StabilityLevel: metrics.ALPHA})
}

func histogramVec(name, help string, buckets []float64, labels ...string) *metrics.HistogramVec {
	return metrics.NewHistogramVec(&metrics.HistogramOpts{Subsystem: "kubelet", Name: name, Help: help, Buckets: buckets, StabilityLevel: metrics.ALPHA}, labels)
}

// New returns a fresh set of metrics registered in their own registries
// (never component-base's global legacyregistry, so tests and several
// sets in one process do not share values). The help texts are
// upstream's, word for word, typos included.
func New() *Metrics {
	m := &Metrics{
		kubelet:       metrics.NewKubeRegistry(),
		probes:        metrics.NewKubeRegistry(),
		start:         metrics.NewKubeRegistry(),
		nodeName:      gaugeVec("node_name", "The node's name. The count is always 1.", "node"),
		cgroupVersion: gauge("cgroup_version", "cgroup version on the hosts."),
		runningPods:   gauge("running_pods", "Number of pods that have a running pod sandbox"),
		runningContainers: gaugeVec("running_containers", "Number of containers currently running",
			"container_state"),
		desiredPods: gaugeVec("desired_pods", "The number of pods the kubelet is being instructed to run. static is true if the pod is not from the apiserver.",
			"static"),
		activePods: gaugeVec("active_pods", "The number of pods the kubelet considers active and which are being considered when admitting new pods. static is true if the pod is not from the apiserver.",
			"static"),
		restartedPods: counterVec("restarted_pods_total", "Number of pods that have been restarted because they were deleted and recreated with the same UID while the kubelet was watching them (common for static pods, extremely uncommon for API pods)",
			"static"),
		podStart: histogram("pod_start_duration_seconds", "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
			podStartupBuckets),
		podStartSLI: histogramVec("pod_start_sli_duration_seconds", "Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
			podStartupBuckets),
		podStartTotal: histogramVec("pod_start_total_duration_seconds", "Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
			podStartupBuckets),
		podWorker: histogramVec("pod_worker_duration_seconds", "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
			metrics.DefBuckets, "operation_type"),
		plegRelistDuration: histogram("pleg_relist_duration_seconds", "Duration in seconds for relisting pods in PLEG.", metrics.DefBuckets),
		plegRelistInterval: histogram("pleg_relist_interval_seconds", "Interval in seconds between relisting in PLEG.", metrics.DefBuckets),
		plegLastSeen:       gauge("pleg_last_seen_seconds", "Timestamp in seconds when PLEG was last seen active."),
		evictions:          counterVec("evictions", "Cumulative number of pod evictions by eviction signal", "eviction_signal"),
		preemptions:        counterVec("preemptions", "Cumulative number of pod preemptions by preemption resource", "preemption_signal"),
		admissionRejections: counterVec("admission_rejections_total", "Cumulative number pod admission rejections by the Kubelet.",
			"reason"),
		startedPods:       counter("started_pods_total", "Cumulative number of pods started"),
		startedPodsErrors: counter("started_pods_errors_total", "Cumulative number of errors when starting pods"),
		startedContainers: counterVec("started_containers_total", "Cumulative number of containers started", "container_type"),
		startedContainersErrors: counterVec("started_containers_errors_total", "Cumulative number of errors when starting containers",
			"container_type", "code"),
		imageGC: counterVec("image_garbage_collected_total", "Total number of images garbage collected by the kubelet, whether through disk usage or image age.",
			"reason"),
		shutdownStart: gauge("graceful_shutdown_start_time_seconds", "Last graceful shutdown start time since unix epoch in seconds"),
		shutdownEnd:   gauge("graceful_shutdown_end_time_seconds", "Last graceful shutdown end time since unix epoch in seconds"),
		runtimeOps:    counterVec("runtime_operations_total", "Cumulative number of runtime operations by operation type.", "operation_type"),
		runtimeOpsDuration: histogramVec("runtime_operations_duration_seconds", "Duration in seconds of runtime operations. Broken down by operation type.",
			metrics.ExponentialBuckets(.005, 2.5, 14), "operation_type"),
		runtimeOpsErrors: counterVec("runtime_operations_errors_total", "Cumulative number of runtime operation errors by operation type.", "operation_type"),
		probeTotal: metrics.NewCounterVec(&metrics.CounterOpts{Subsystem: "prober", Name: "probe_total",
			Help: "Cumulative number of a liveness, readiness or startup probe for a container by result.", StabilityLevel: metrics.BETA},
			[]string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}),
		probeDuration: metrics.NewHistogramVec(&metrics.HistogramOpts{Subsystem: "prober", Name: "probe_duration_seconds",
			Help: "Duration in seconds for a probe response.", StabilityLevel: metrics.ALPHA},
			[]string{"probe_type", "container", "pod", "namespace"}),
	}
	m.kubelet.MustRegister(m.nodeName, m.cgroupVersion, m.runningPods, m.runningContainers, m.desiredPods, m.activePods,
		m.restartedPods, m.podStart, m.podStartSLI, m.podStartTotal, m.podWorker, m.plegRelistDuration, m.plegRelistInterval,
		m.plegLastSeen, m.evictions, m.preemptions, m.admissionRejections, m.startedPods, m.startedPodsErrors,
		m.startedContainers, m.startedContainersErrors, m.imageGC, m.shutdownStart, m.shutdownEnd,
		m.runtimeOps, m.runtimeOpsDuration, m.runtimeOpsErrors)
	m.probes.MustRegister(m.probeTotal, m.probeDuration)
	_ = metrics.RegisterProcessStartTime(m.start.Register) // fails only for a second registration
	return m
}

// Kubelet is what the kubelet serves on /metrics (its kubelet_* part).
func (m *Metrics) Kubelet() prometheus.Gatherer { return m.kubelet }

// Probes is the prober's families, without a process start time (for a
// registry that has its own process collector).
func (m *Metrics) Probes() prometheus.Gatherer { return m.probes }

// ProbesEndpoint is what the kubelet serves on /metrics/probes: the
// prober's families and process_start_time_seconds of this process, the
// start of the counters.
func (m *Metrics) ProbesEndpoint() prometheus.Gatherer {
	return prometheus.Gatherers{m.probes, m.start}
}

// SetNodeName sets kubelet_node_name{node} to 1, once at start-up.
func (m *Metrics) SetNodeName(name string) {
	if m != nil {
		m.nodeName.WithLabelValues(name).Set(1)
	}
}

// SetCgroupVersion sets kubelet_cgroup_version (1 or 2).
func (m *Metrics) SetCgroupVersion(v int) {
	if m != nil {
		m.cgroupVersion.Set(float64(v))
	}
}

// Relisted records one PLEG relist that began at start and took d:
// kubelet_pleg_relist_duration_seconds always, and when it succeeded the
// interval since the previous successful relist (zero: none yet) and
// kubelet_pleg_last_seen_seconds. The interval is upstream's: from the
// previous success to the start of this relist.
func (m *Metrics) Relisted(start time.Time, d time.Duration, sincePrevious time.Duration, ok bool) {
	if m == nil {
		return
	}
	if sincePrevious > 0 {
		m.plegRelistInterval.Observe(sincePrevious.Seconds())
	}
	m.plegRelistDuration.Observe(d.Seconds())
	if ok {
		m.plegLastSeen.Set(float64(start.Unix()))
	}
}

// SetRunning sets kubelet_running_pods (pods with a ready sandbox) and
// kubelet_running_containers by state, from one relist. Every state of
// ContainerStates is set, zero when none is in it (upstream leaves a
// state that emptied at its last count).
func (m *Metrics) SetRunning(pods int, containers map[string]int) {
	if m == nil {
		return
	}
	m.runningPods.Set(float64(pods))
	for _, s := range ContainerStates {
		m.runningContainers.WithLabelValues(s).Set(float64(containers[s]))
	}
}

func staticLabel(static bool) string {
	if static {
		return "true"
	}
	return ""
}

// SetPodCounts sets kubelet_desired_pods and kubelet_active_pods, split by
// static ("true") and API pods (""), as housekeeping does.
func (m *Metrics) SetPodCounts(desiredAPI, desiredStatic, activeAPI, activeStatic int) {
	if m == nil {
		return
	}
	m.desiredPods.WithLabelValues("").Set(float64(desiredAPI))
	m.desiredPods.WithLabelValues("true").Set(float64(desiredStatic))
	m.activePods.WithLabelValues("").Set(float64(activeAPI))
	m.activePods.WithLabelValues("true").Set(float64(activeStatic))
}

// PodRestarted counts a pod that is started again under the UID of one
// that was removed (kubelet_restarted_pods_total).
func (m *Metrics) PodRestarted(static bool) {
	if m != nil {
		m.restartedPods.WithLabelValues(staticLabel(static)).Inc()
	}
}

// PodStarted observes kubelet_pod_start_duration_seconds: from the pod's
// first sighting (its config.seen) to its first Running status.
func (m *Metrics) PodStarted(d time.Duration) {
	if m != nil {
		m.podStart.Observe(d.Seconds())
	}
}

// PodWorkerDone observes kubelet_pod_worker_duration_seconds for one
// pod worker pass of operation op that was asked for d ago.
func (m *Metrics) PodWorkerDone(op string, d time.Duration) {
	if m != nil {
		m.podWorker.WithLabelValues(op).Observe(d.Seconds())
	}
}

// Evicted counts a pod evicted for signal (kubelet_evictions).
func (m *Metrics) Evicted(signal string) {
	if m != nil {
		m.evictions.WithLabelValues(signal).Inc()
	}
}

// Preempted counts a pod preempted for resource (kubelet_preemptions).
func (m *Metrics) Preempted(resource string) {
	if m != nil {
		m.preemptions.WithLabelValues(resource).Inc()
	}
}

// AdmissionRejected counts a pod refused by admission
// (kubelet_admission_rejections_total), reasons outside upstream's allow
// list folded as upstream folds them.
func (m *Metrics) AdmissionRejected(reason string) {
	if m == nil {
		return
	}
	m.admissionRejections.WithLabelValues(AdmissionReasonLabel(reason)).Inc()
}

// AdmissionReasonLabel is the reason label kubelet_admission_rejections_total
// counts a rejection reason under.
func AdmissionReasonLabel(reason string) string {
	switch {
	case admissionReasons[reason]:
		return reason
	case strings.HasPrefix(reason, "OutOf"):
		return "OutOfExtendedResources"
	default:
		return "Other"
	}
}

// SandboxStarting counts a pod sandbox about to be created
// (kubelet_started_pods_total); SandboxFailed counts its failure.
func (m *Metrics) SandboxStarting() {
	if m != nil {
		m.startedPods.Inc()
	}
}

// SandboxFailed counts a sandbox that could not be created
// (kubelet_started_pods_errors_total).
func (m *Metrics) SandboxFailed() {
	if m != nil {
		m.startedPodsErrors.Inc()
	}
}

// ContainerStarting counts a container start attempt past its back-off
// (kubelet_started_containers_total{container_type}).
func (m *Metrics) ContainerStarting(containerType string) {
	if m != nil {
		m.startedContainers.WithLabelValues(containerType).Inc()
	}
}

// ContainerFailed counts a failed start with its error code, the
// container's waiting reason (ErrImagePull, CreateContainerError,
// RunContainerError, ...), as kubelet_started_containers_errors_total.
func (m *Metrics) ContainerFailed(containerType, code string) {
	if m != nil {
		m.startedContainersErrors.WithLabelValues(containerType, code).Inc()
	}
}

// ImageCollected counts an image removed by image GC for reason
// (ImageGCAge or ImageGCSpace).
func (m *Metrics) ImageCollected(reason string) {
	if m != nil {
		m.imageGC.WithLabelValues(reason).Inc()
	}
}

// SetShutdownTimes sets the graceful shutdown gauges from start and end;
// a zero time sets its gauge to 0.
func (m *Metrics) SetShutdownTimes(start, end time.Time) {
	if m == nil {
		return
	}
	m.shutdownStart.Set(unixSeconds(start))
	m.shutdownEnd.Set(unixSeconds(end))
}

func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.Unix())
}

// Probe result label values of prober_probe_total.
const (
	ProbeSuccessful = "successful"
	ProbeFailed     = "failed"
	ProbeUnknown    = "unknown"
)

// ProbeTarget names the container a probe worker probes, for the prober's labels.
type ProbeTarget struct {
	// Kind is probe_type: Liveness, Readiness or Startup.
	Kind                              string
	Namespace, Pod, PodUID, Container string
}

// Probed counts one probe run with result (ProbeSuccessful, ...) in
// prober_probe_total and, for a success or an unknown result as upstream
// does, its duration in prober_probe_duration_seconds.
func (m *Metrics) Probed(t ProbeTarget, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.probeTotal.WithLabelValues(t.Kind, result, t.Container, t.Pod, t.Namespace, t.PodUID).Inc()
	if result != ProbeFailed {
		m.probeDuration.WithLabelValues(t.Kind, t.Container, t.Pod, t.Namespace).Observe(d.Seconds())
	}
}

// ProbeStopped drops the series of a probe worker that ended, as upstream's
// worker does when it exits.
func (m *Metrics) ProbeStopped(t ProbeTarget) {
	if m == nil {
		return
	}
	for _, r := range []string{ProbeSuccessful, ProbeFailed, ProbeUnknown} {
		m.probeTotal.DeleteLabelValues(t.Kind, r, t.Container, t.Pod, t.Namespace, t.PodUID)
	}
	m.probeDuration.DeleteLabelValues(t.Kind, t.Container, t.Pod, t.Namespace)
}
