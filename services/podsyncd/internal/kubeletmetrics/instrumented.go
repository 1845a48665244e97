package kubeletmetrics

import (
	"context"
	"time"

	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// InstrumentRuntime returns rt counting every call as the kubelet's
// instrumented runtime service does (pkg/kubelet/kuberuntime):
// kubelet_runtime_operations_total and _duration_seconds by operation_type,
// and kubelet_runtime_operations_errors_total for the calls that failed.
// Close and the GetContainerEvents stream are not operations. A nil m
// returns rt itself.
func (m *Metrics) InstrumentRuntime(rt criapi.RuntimeService) criapi.RuntimeService {
	if m == nil {
		return rt
	}
	return &instrumentedRuntime{RuntimeService: rt, m: m}
}

// InstrumentImages is InstrumentRuntime for the image service.
func (m *Metrics) InstrumentImages(img criapi.ImageManagerService) criapi.ImageManagerService {
	if m == nil {
		return img
	}
	return &instrumentedImages{ImageManagerService: img, m: m}
}

func (m *Metrics) record(op string, start time.Time, err error) {
	m.runtimeOps.WithLabelValues(op).Inc()
	m.runtimeOpsDuration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		m.runtimeOpsErrors.WithLabelValues(op).Inc()
	}
}

type instrumentedRuntime struct {
	criapi.RuntimeService
	m *Metrics
}

type instrumentedImages struct {
	criapi.ImageManagerService
	m *Metrics
}

func (r *instrumentedRuntime) Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error) {
	start := time.Now()
	out, err := r.RuntimeService.Version(ctx, apiVersion)
	r.m.record("version", start, err)
	return out, err
}

func (r *instrumentedRuntime) CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	start := time.Now()
	out, err := r.RuntimeService.CreateContainer(ctx, podSandboxID, config, sandboxConfig)
	r.m.record("create_container", start, err)
	return out, err
}

func (r *instrumentedRuntime) StartContainer(ctx context.Context, containerID string) error {
	start := time.Now()
	err := r.RuntimeService.StartContainer(ctx, containerID)
	r.m.record("start_container", start, err)
	return err
}

func (r *instrumentedRuntime) StopContainer(ctx context.Context, containerID string, timeout int64) error {
	start := time.Now()
	err := r.RuntimeService.StopContainer(ctx, containerID, timeout)
	r.m.record("stop_container", start, err)
	return err
}

func (r *instrumentedRuntime) RemoveContainer(ctx context.Context, containerID string) error {
	start := time.Now()
	err := r.RuntimeService.RemoveContainer(ctx, containerID)
	r.m.record("remove_container", start, err)
	return err
}

func (r *instrumentedRuntime) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	start := time.Now()
	out, err := r.RuntimeService.ListContainers(ctx, filter)
	r.m.record("list_containers", start, err)
	return out, err
}

func (r *instrumentedRuntime) ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	start := time.Now()
	out, err := r.RuntimeService.ContainerStatus(ctx, containerID, verbose)
	r.m.record("container_status", start, err)
	return out, err
}

func (r *instrumentedRuntime) UpdateContainerResources(ctx context.Context, containerID string, resources *runtimeapi.ContainerResources) error {
	start := time.Now()
	err := r.RuntimeService.UpdateContainerResources(ctx, containerID, resources)
	r.m.record("update_container", start, err)
	return err
}

func (r *instrumentedRuntime) ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	start := time.Now()
	stdout, stderr, err := r.RuntimeService.ExecSync(ctx, containerID, cmd, timeout)
	r.m.record("exec_sync", start, err)
	return stdout, stderr, err
}

func (r *instrumentedRuntime) Exec(ctx context.Context, request *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	start := time.Now()
	out, err := r.RuntimeService.Exec(ctx, request)
	r.m.record("exec", start, err)
	return out, err
}

func (r *instrumentedRuntime) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	start := time.Now()
	out, err := r.RuntimeService.Attach(ctx, req)
	r.m.record("attach", start, err)
	return out, err
}

func (r *instrumentedRuntime) ReopenContainerLog(ctx context.Context, ContainerID string) error {
	start := time.Now()
	err := r.RuntimeService.ReopenContainerLog(ctx, ContainerID)
	r.m.record("reopen_container_log", start, err)
	return err
}

func (r *instrumentedRuntime) CheckpointContainer(ctx context.Context, options *runtimeapi.CheckpointContainerRequest) error {
	start := time.Now()
	err := r.RuntimeService.CheckpointContainer(ctx, options)
	r.m.record("checkpoint_container", start, err)
	return err
}

func (r *instrumentedRuntime) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error) {
	start := time.Now()
	out, err := r.RuntimeService.RunPodSandbox(ctx, config, runtimeHandler)
	r.m.record("run_podsandbox", start, err)
	return out, err
}

func (r *instrumentedRuntime) StopPodSandbox(ctx context.Context, podSandboxID string) error {
	start := time.Now()
	err := r.RuntimeService.StopPodSandbox(ctx, podSandboxID)
	r.m.record("stop_podsandbox", start, err)
	return err
}

func (r *instrumentedRuntime) RemovePodSandbox(ctx context.Context, podSandboxID string) error {
	start := time.Now()
	err := r.RuntimeService.RemovePodSandbox(ctx, podSandboxID)
	r.m.record("remove_podsandbox", start, err)
	return err
}

func (r *instrumentedRuntime) PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	start := time.Now()
	out, err := r.RuntimeService.PodSandboxStatus(ctx, podSandboxID, verbose)
	r.m.record("podsandbox_status", start, err)
	return out, err
}

func (r *instrumentedRuntime) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	start := time.Now()
	out, err := r.RuntimeService.ListPodSandbox(ctx, filter)
	r.m.record("list_podsandbox", start, err)
	return out, err
}

func (r *instrumentedRuntime) PortForward(ctx context.Context, request *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	start := time.Now()
	out, err := r.RuntimeService.PortForward(ctx, request)
	r.m.record("port_forward", start, err)
	return out, err
}

func (r *instrumentedRuntime) UpdatePodSandboxResources(ctx context.Context, request *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	start := time.Now()
	out, err := r.RuntimeService.UpdatePodSandboxResources(ctx, request)
	r.m.record("update_podsandbox_resources", start, err)
	return out, err
}

func (r *instrumentedRuntime) ContainerStats(ctx context.Context, containerID string) (*runtimeapi.ContainerStats, error) {
	start := time.Now()
	out, err := r.RuntimeService.ContainerStats(ctx, containerID)
	r.m.record("container_stats", start, err)
	return out, err
}

func (r *instrumentedRuntime) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	start := time.Now()
	out, err := r.RuntimeService.ListContainerStats(ctx, filter)
	r.m.record("list_container_stats", start, err)
	return out, err
}

func (r *instrumentedRuntime) PodSandboxStats(ctx context.Context, podSandboxID string) (*runtimeapi.PodSandboxStats, error) {
	start := time.Now()
	out, err := r.RuntimeService.PodSandboxStats(ctx, podSandboxID)
	r.m.record("podsandbox_stats", start, err)
	return out, err
}

func (r *instrumentedRuntime) ListPodSandboxStats(ctx context.Context, filter *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	start := time.Now()
	out, err := r.RuntimeService.ListPodSandboxStats(ctx, filter)
	r.m.record("list_podsandbox_stats", start, err)
	return out, err
}

func (r *instrumentedRuntime) ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error) {
	start := time.Now()
	out, err := r.RuntimeService.ListMetricDescriptors(ctx)
	r.m.record("list_metric_descriptors", start, err)
	return out, err
}

func (r *instrumentedRuntime) ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	start := time.Now()
	out, err := r.RuntimeService.ListPodSandboxMetrics(ctx)
	r.m.record("list_podsandbox_metrics", start, err)
	return out, err
}

func (r *instrumentedRuntime) UpdateRuntimeConfig(ctx context.Context, runtimeConfig *runtimeapi.RuntimeConfig) error {
	start := time.Now()
	err := r.RuntimeService.UpdateRuntimeConfig(ctx, runtimeConfig)
	r.m.record("update_runtime_config", start, err)
	return err
}

func (r *instrumentedRuntime) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	start := time.Now()
	out, err := r.RuntimeService.Status(ctx, verbose)
	r.m.record("status", start, err)
	return out, err
}

func (r *instrumentedRuntime) RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	start := time.Now()
	out, err := r.RuntimeService.RuntimeConfig(ctx)
	r.m.record("runtime_config", start, err)
	return out, err
}

func (r *instrumentedImages) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	start := time.Now()
	out, err := r.ImageManagerService.ListImages(ctx, filter)
	r.m.record("list_images", start, err)
	return out, err
}

func (r *instrumentedImages) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	start := time.Now()
	out, err := r.ImageManagerService.ImageStatus(ctx, image, verbose)
	r.m.record("image_status", start, err)
	return out, err
}

func (r *instrumentedImages) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	start := time.Now()
	out, err := r.ImageManagerService.PullImage(ctx, image, auth, podSandboxConfig)
	r.m.record("pull_image", start, err)
	return out, err
}

func (r *instrumentedImages) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	start := time.Now()
	err := r.ImageManagerService.RemoveImage(ctx, image)
	r.m.record("remove_image", start, err)
	return err
}

func (r *instrumentedImages) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	start := time.Now()
	out, err := r.ImageManagerService.ImageFsInfo(ctx)
	r.m.record("image_fs_info", start, err)
	return out, err
}
