package kubeletmetrics

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc"
)

// runtimeOperations are upstream's operation_type names of the CRI calls
// (pkg/kubelet/kuberuntime's instrumented services), by gRPC method name.
var runtimeOperations = map[string]string{
	"Version": "version", "Status": "status", "RuntimeConfig": "runtime_config",
	"CreateContainer": "create_container", "StartContainer": "start_container", "StopContainer": "stop_container",
	"RemoveContainer": "remove_container", "ListContainers": "list_containers", "ContainerStatus": "container_status",
	"UpdateContainerResources": "update_container", "ReopenContainerLog": "reopen_container_log",
	"ExecSync": "exec_sync", "Exec": "exec", "Attach": "attach", "PortForward": "port_forward",
	"RunPodSandbox": "run_podsandbox", "StopPodSandbox": "stop_podsandbox", "RemovePodSandbox": "remove_podsandbox",
	"PodSandboxStatus": "podsandbox_status", "ListPodSandbox": "list_podsandbox",
	"ContainerStats": "container_stats", "ListContainerStats": "list_container_stats",
	"PodSandboxStats": "podsandbox_stats", "ListPodSandboxStats": "list_podsandbox_stats",
	"UpdatePodSandboxResources": "update_podsandbox_resources", "UpdateRuntimeConfig": "update_runtime_config",
	"CheckpointContainer": "checkpoint_container", "ListMetricDescriptors": "list_metric_descriptors",
	"ListPodSandboxMetrics": "list_podsandbox_metrics",
	"ListImages":            "list_images", "ImageStatus": "image_status", "PullImage": "pull_image",
	"RemoveImage": "remove_image", "ImageFsInfo": "image_fs_info",
}

// RuntimeOperation is the operation_type of a full gRPC method name of the
// CRI ("/runtime.v1.RuntimeService/ListPodSandbox" → "list_podsandbox"),
// "" for anything else.
func RuntimeOperation(method string) string {
	svc, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok || (svc != "runtime.v1.RuntimeService" && svc != "runtime.v1.ImageService") {
		return ""
	}
	return runtimeOperations[name]
}

// RuntimeInterceptor counts every unary CRI call made through a connection
// dialed with it, as the kubelet's instrumented runtime does:
// kubelet_runtime_operations_total and _duration_seconds by operation_type,
// and kubelet_runtime_operations_errors_total for the calls that failed.
func (m *Metrics) RuntimeInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		op := RuntimeOperation(method)
		if m == nil || op == "" {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		m.runtimeOps.WithLabelValues(op).Inc()
		m.runtimeOpsDuration.WithLabelValues(op).Observe(time.Since(start).Seconds())
		if err != nil {
			m.runtimeOpsErrors.WithLabelValues(op).Inc()
		}
		return err
	}
}
