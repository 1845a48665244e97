package kubeletmetrics

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv"
)

// TestUpstreamExposition holds the families to upstream's exposition:
// names, help texts with their stability prefix, types, label names and
// buckets exactly as the kubelet v1.36 serves them.
func TestUpstreamExposition(t *testing.T) {
	m := New()
	m.SetNodeName("node-a")
	m.SetCgroupVersion(1)
	m.SetRunning(2, map[string]int{"running": 3, "exited": 1})
	m.SetPodCounts(4, 1, 3, 1)
	m.PodRestarted(true)
	m.PodStarted(2500 * time.Millisecond)
	m.PodWorkerDone(OpCreate, 50*time.Millisecond)
	m.Evicted("memory.available")
	m.AdmissionRejected("OutOfcpu")
	m.SandboxStarting()
	m.SandboxFailed()
	m.ContainerStarting(ContainerTypeInit)
	m.ContainerFailed(ContainerTypeInit, "ErrImagePull")
	m.ImageCollected(ImageGCAge)
	m.SetShutdownTimes(time.Unix(1700000000, 0), time.Time{})
	m.Relisted(time.Unix(1700000100, 0), 20*time.Millisecond, time.Second, true)
	m.Probed(ProbeTarget{Kind: "Readiness", Namespace: "ns", Pod: "p", PodUID: "u1", Container: "c"}, ProbeSuccessful, 10*time.Millisecond)

	want := `
# HELP kubelet_node_name [ALPHA] The node's name. The count is always 1.
# TYPE kubelet_node_name gauge
kubelet_node_name{node="node-a"} 1
# HELP kubelet_cgroup_version [ALPHA] cgroup version on the hosts.
# TYPE kubelet_cgroup_version gauge
kubelet_cgroup_version 1
# HELP kubelet_running_pods [ALPHA] Number of pods that have a running pod sandbox
# TYPE kubelet_running_pods gauge
kubelet_running_pods 2
# HELP kubelet_running_containers [ALPHA] Number of containers currently running
# TYPE kubelet_running_containers gauge
kubelet_running_containers{container_state="created"} 0
kubelet_running_containers{container_state="exited"} 1
kubelet_running_containers{container_state="running"} 3
kubelet_running_containers{container_state="unknown"} 0
# HELP kubelet_desired_pods [ALPHA] The number of pods the kubelet is being instructed to run. static is true if the pod is not from the apiserver.
# TYPE kubelet_desired_pods gauge
kubelet_desired_pods{static=""} 4
kubelet_desired_pods{static="true"} 1
# HELP kubelet_active_pods [ALPHA] The number of pods the kubelet considers active and which are being considered when admitting new pods. static is true if the pod is not from the apiserver.
# TYPE kubelet_active_pods gauge
kubelet_active_pods{static=""} 3
kubelet_active_pods{static="true"} 1
# HELP kubelet_restarted_pods_total [ALPHA] Number of pods that have been restarted because they were deleted and recreated with the same UID while the kubelet was watching them (common for static pods, extremely uncommon for API pods)
# TYPE kubelet_restarted_pods_total counter
kubelet_restarted_pods_total{static="true"} 1
# HELP kubelet_evictions [ALPHA] Cumulative number of pod evictions by eviction signal
# TYPE kubelet_evictions counter
kubelet_evictions{eviction_signal="memory.available"} 1
# HELP kubelet_admission_rejections_total [ALPHA] Cumulative number pod admission rejections by the Kubelet.
# TYPE kubelet_admission_rejections_total counter
kubelet_admission_rejections_total{reason="OutOfcpu"} 1
# HELP kubelet_started_pods_total [ALPHA] Cumulative number of pods started
# TYPE kubelet_started_pods_total counter
kubelet_started_pods_total 1
# HELP kubelet_started_pods_errors_total [ALPHA] Cumulative number of errors when starting pods
# TYPE kubelet_started_pods_errors_total counter
kubelet_started_pods_errors_total 1
# HELP kubelet_started_containers_total [ALPHA] Cumulative number of containers started
# TYPE kubelet_started_containers_total counter
kubelet_started_containers_total{container_type="init_container"} 1
# HELP kubelet_started_containers_errors_total [ALPHA] Cumulative number of errors when starting containers
# TYPE kubelet_started_containers_errors_total counter
kubelet_started_containers_errors_total{code="ErrImagePull",container_type="init_container"} 1
# HELP kubelet_image_garbage_collected_total [ALPHA] Total number of images garbage collected by the kubelet, whether through disk usage or image age.
# TYPE kubelet_image_garbage_collected_total counter
kubelet_image_garbage_collected_total{reason="age"} 1
# HELP kubelet_graceful_shutdown_start_time_seconds [ALPHA] Last graceful shutdown start time since unix epoch in seconds
# TYPE kubelet_graceful_shutdown_start_time_seconds gauge
kubelet_graceful_shutdown_start_time_seconds 1.7e+09
# HELP kubelet_graceful_shutdown_end_time_seconds [ALPHA] Last graceful shutdown end time since unix epoch in seconds
# TYPE kubelet_graceful_shutdown_end_time_seconds gauge
kubelet_graceful_shutdown_end_time_seconds 0
# HELP kubelet_pleg_last_seen_seconds [ALPHA] Timestamp in seconds when PLEG was last seen active.
# TYPE kubelet_pleg_last_seen_seconds gauge
kubelet_pleg_last_seen_seconds 1.7000001e+09
# HELP kubelet_pod_start_duration_seconds [ALPHA] Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run
# TYPE kubelet_pod_start_duration_seconds histogram
kubelet_pod_start_duration_seconds_bucket{le="0.5"} 0
kubelet_pod_start_duration_seconds_bucket{le="1"} 0
kubelet_pod_start_duration_seconds_bucket{le="2"} 0
kubelet_pod_start_duration_seconds_bucket{le="3"} 1
kubelet_pod_start_duration_seconds_bucket{le="4"} 1
kubelet_pod_start_duration_seconds_bucket{le="5"} 1
kubelet_pod_start_duration_seconds_bucket{le="6"} 1
kubelet_pod_start_duration_seconds_bucket{le="8"} 1
kubelet_pod_start_duration_seconds_bucket{le="10"} 1
kubelet_pod_start_duration_seconds_bucket{le="20"} 1
kubelet_pod_start_duration_seconds_bucket{le="30"} 1
kubelet_pod_start_duration_seconds_bucket{le="45"} 1
kubelet_pod_start_duration_seconds_bucket{le="60"} 1
kubelet_pod_start_duration_seconds_bucket{le="120"} 1
kubelet_pod_start_duration_seconds_bucket{le="180"} 1
kubelet_pod_start_duration_seconds_bucket{le="240"} 1
kubelet_pod_start_duration_seconds_bucket{le="300"} 1
kubelet_pod_start_duration_seconds_bucket{le="360"} 1
kubelet_pod_start_duration_seconds_bucket{le="480"} 1
kubelet_pod_start_duration_seconds_bucket{le="600"} 1
kubelet_pod_start_duration_seconds_bucket{le="900"} 1
kubelet_pod_start_duration_seconds_bucket{le="1200"} 1
kubelet_pod_start_duration_seconds_bucket{le="1800"} 1
kubelet_pod_start_duration_seconds_bucket{le="2700"} 1
kubelet_pod_start_duration_seconds_bucket{le="3600"} 1
kubelet_pod_start_duration_seconds_bucket{le="+Inf"} 1
kubelet_pod_start_duration_seconds_sum 2.5
kubelet_pod_start_duration_seconds_count 1
# HELP kubelet_pod_worker_duration_seconds [ALPHA] Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync
# TYPE kubelet_pod_worker_duration_seconds histogram
kubelet_pod_worker_duration_seconds_bucket{operation_type="create",le="0.005"} 0
kubelet_pod_worker_duration_seconds_bucket{operation_type="create",le="0.01"} 0
kubelet_pod_worker_duration_seconds_bucket{operation_type="create",le="0.025"} 0
kubelet_pod_worker_duration_seconds_bucket{operation_type="create",le="0.05"} 1
kubelet_pod_worker_duration_seconds_bucket{operation_type="create",le="0.1"} 1
kubelet_pod_worker_duration_seconds_bucket{operation_type="create",le="0.25"} 1
kubelet_pod_worker_duration_seconds_bucket{operation_type="create",le="0.5"} 1
kubelet_pod_worker_duration_seconds_bucket{operation_type="create",le="1"} 1
kubelet_pod_worker_duration_seconds_bucket{operation_type="create",le="2.5"} 1
kubelet_pod_worker_duration_seconds_bucket{operation_type="create",le="5"} 1
kubelet_pod_worker_duration_seconds_bucket{operation_type="create",le="10"} 1
kubelet_pod_worker_duration_seconds_bucket{operation_type="create",le="+Inf"} 1
kubelet_pod_worker_duration_seconds_sum{operation_type="create"} 0.05
kubelet_pod_worker_duration_seconds_count{operation_type="create"} 1
`
	names := []string{"kubelet_node_name", "kubelet_cgroup_version", "kubelet_running_pods", "kubelet_running_containers",
		"kubelet_desired_pods", "kubelet_active_pods", "kubelet_restarted_pods_total", "kubelet_evictions",
		"kubelet_admission_rejections_total", "kubelet_started_pods_total", "kubelet_started_pods_errors_total",
		"kubelet_started_containers_total", "kubelet_started_containers_errors_total", "kubelet_image_garbage_collected_total",
		"kubelet_graceful_shutdown_start_time_seconds", "kubelet_graceful_shutdown_end_time_seconds", "kubelet_pleg_last_seen_seconds",
		"kubelet_pod_start_duration_seconds", "kubelet_pod_worker_duration_seconds"}
	if err := testutil.GatherAndCompare(m.Kubelet(), strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}

	probes := `
# HELP prober_probe_total [BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.
# TYPE prober_probe_total counter
prober_probe_total{container="c",namespace="ns",pod="p",pod_uid="u1",probe_type="Readiness",result="successful"} 1
`
	if err := testutil.GatherAndCompare(m.ProbesEndpoint(), strings.NewReader(probes), "prober_probe_total"); err != nil {
		t.Fatal(err)
	}
	got, err := testenv.GatherMetrics(m.ProbesEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	if got["process_start_time_seconds"] == nil {
		t.Error("/metrics/probes has no process_start_time_seconds")
	}
	if mf := got["prober_probe_duration_seconds"]; mf.GetHelp() != "[ALPHA] Duration in seconds for a probe response." || len(mf.GetMetric()) != 1 {
		t.Errorf("prober_probe_duration_seconds = %v", mf)
	}
	// The PLEG histograms: one relist, one interval.
	k, err := testenv.GatherMetrics(m.Kubelet())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kubelet_pleg_relist_duration_seconds", "kubelet_pleg_relist_interval_seconds"} {
		if n := k.Count(name, nil); n != 1 {
			t.Errorf("%s count = %d, want 1", name, n)
		}
	}
}

func TestAdmissionReasonLabel(t *testing.T) {
	for reason, want := range map[string]string{
		"OutOfcpu": "OutOfcpu", "OutOfpods": "OutOfpods", "OutOfexample.com/gpu": "OutOfExtendedResources",
		"NodeShutdown": "NodeShutdown", "Evicted": "Evicted", "HostPortConflict": "Other", "": "Other",
	} {
		if got := AdmissionReasonLabel(reason); got != want {
			t.Errorf("AdmissionReasonLabel(%q) = %q, want %q", reason, got, want)
		}
	}
}

// TestProbeStoppedDropsSeries: a worker's series go when it stops, as
// upstream's do, and only the worker's own.
func TestProbeStoppedDropsSeries(t *testing.T) {
	m := New()
	a := ProbeTarget{Kind: "Liveness", Namespace: "ns", Pod: "p", PodUID: "u1", Container: "a"}
	b := ProbeTarget{Kind: "Liveness", Namespace: "ns", Pod: "p", PodUID: "u1", Container: "b"}
	m.Probed(a, ProbeFailed, time.Millisecond)
	m.Probed(a, ProbeSuccessful, time.Millisecond)
	m.Probed(b, ProbeUnknown, time.Millisecond)
	m.ProbeStopped(a)
	got, err := testenv.GatherMetrics(m.Probes())
	if err != nil {
		t.Fatal(err)
	}
	if n := got.Sum("prober_probe_total", map[string]string{"container": "a"}); n != 0 {
		t.Errorf("stopped worker's probe_total = %v, want its series gone", n)
	}
	if n := got.Sum("prober_probe_total", map[string]string{"container": "b", "result": "unknown"}); n != 1 {
		t.Errorf("other worker's probe_total = %v, want 1", n)
	}
	if n := got.Count("prober_probe_duration_seconds", nil); n != 1 {
		t.Errorf("probe durations = %d, want only b's unknown result (a failure is not timed)", n)
	}
}

// TestNilMetrics: parts built without metrics call the methods on nil.
func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.SetNodeName("n")
	m.Relisted(time.Now(), time.Millisecond, 0, true)
	m.SetRunning(1, nil)
	m.PodWorkerDone(OpSync, time.Millisecond)
	m.Probed(ProbeTarget{}, ProbeSuccessful, time.Millisecond)
	m.ProbeStopped(ProbeTarget{})
	m.SetShutdownTimes(time.Now(), time.Now())
}

// fakeCRI answers ListPodSandbox and PullImage (denied); other calls
// panic (nil embedded).
type fakeCRI struct {
	criapi.RuntimeService
	criapi.ImageManagerService
}

func (fakeCRI) Close(context.Context) error { return nil }

func (fakeCRI) ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return nil, nil
}

func (fakeCRI) PullImage(context.Context, *runtimeapi.ImageSpec, *runtimeapi.AuthConfig, *runtimeapi.PodSandboxConfig) (string, error) {
	return "", errors.New("denied")
}

// TestInstrumentRuntime: CRI calls through the instrumented services count
// under upstream's operation types, failures also as errors, with
// upstream's help and buckets; a nil Metrics hands the service back.
func TestInstrumentRuntime(t *testing.T) {
	m := New()
	rt, img := m.InstrumentRuntime(fakeCRI{}), m.InstrumentImages(fakeCRI{})
	ctx := context.Background()
	_, _ = rt.ListPodSandbox(ctx, nil)
	_, _ = rt.ListPodSandbox(ctx, nil)
	_, _ = img.PullImage(ctx, &runtimeapi.ImageSpec{Image: "x"}, nil, nil)
	got, err := testenv.GatherMetrics(m.Kubelet())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, op string
		want     float64
	}{
		{"kubelet_runtime_operations_total", "list_podsandbox", 2},
		{"kubelet_runtime_operations_total", "pull_image", 1},
		{"kubelet_runtime_operations_errors_total", "pull_image", 1},
		{"kubelet_runtime_operations_errors_total", "list_podsandbox", 0},
	} {
		if v := got.Sum(tc.name, map[string]string{"operation_type": tc.op}); v != tc.want {
			t.Errorf("%s{operation_type=%s} = %v, want %v", tc.name, tc.op, v, tc.want)
		}
	}
	if n := got.Sum("kubelet_runtime_operations_total", nil); n != 3 {
		t.Errorf("operations counted %v, want 3", n)
	}
	if got["kubelet_runtime_operations_duration_seconds"].GetHelp() != "[ALPHA] Duration in seconds of runtime operations. Broken down by operation type." {
		t.Errorf("duration help %q", got["kubelet_runtime_operations_duration_seconds"].GetHelp())
	}
	if b := got["kubelet_runtime_operations_duration_seconds"].GetMetric()[0].GetHistogram().GetBucket(); len(b) != 14 || b[0].GetUpperBound() != 0.005 {
		t.Errorf("duration buckets %v, want upstream's 14 from 5 ms by 2.5", b)
	}
	var none *Metrics
	if f := (fakeCRI{}); none.InstrumentRuntime(f) != criapi.RuntimeService(f) {
		t.Error("a nil Metrics wrapped the runtime service")
	}
}
