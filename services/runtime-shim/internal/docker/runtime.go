package docker

import (
	"context"
	"strings"

	"github.com/moby/moby/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/version"
)

// RuntimeName is what Version reports as the runtime.
const RuntimeName = "docker"

// Version reports the shim and the Docker Engine behind it.
func (b *Backend) Version(ctx context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	v, err := b.cli.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return nil, toStatus(err, "docker version")
	}
	return &runtimeapi.VersionResponse{
		Version: "0.1.0", RuntimeName: RuntimeName,
		RuntimeVersion: v.Version, RuntimeApiVersion: "v1",
	}, nil
}

// Status reports RuntimeReady when Docker answers. NetworkReady is the
// runtime's readiness on Docker's bridge; with a network plugin it also
// needs the plugin ready (reason NetworkPluginNotReady, with the plugin's
// word on what is missing, otherwise). A ready runtime lists its handlers,
// the default and the daemon's runtimes, with the features the daemon
// offers (handlers.go).
func (b *Backend) Status(ctx context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	ready, reason, msg := true, "", ""
	if err := b.Ping(ctx); err != nil {
		ready, reason, msg = false, "DockerDown", err.Error()
	}
	netReady, netReason, netMsg := ready, reason, msg
	if ready {
		netReady, netReason, netMsg = b.networkReady()
	}
	resp := &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: ready, Reason: reason, Message: msg},
		{Type: runtimeapi.NetworkReady, Status: netReady, Reason: netReason, Message: netMsg},
	}}}
	if ready {
		resp.RuntimeHandlers = b.runtimeHandlers(ctx)
		// Docker always merges the groups of the image's /etc/group into
		// a container's, so SupplementalGroupsPolicy Strict cannot be
		// kept (groupAdd refuses it); the node says so and the agent
		// refuses such pods at admission, as the kubelet does.
		resp.Features = &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: false}
	}
	if req.Verbose {
		resp.Info = map[string]string{"shim": version.Version, "instance": b.opts.Instance}
	}
	return resp, nil
}

// RuntimeConfig reports Docker's cgroup driver so the kubelet side matches it.
func (b *Backend) RuntimeConfig(ctx context.Context, _ *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	info, err := b.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return nil, toStatus(err, "docker info")
	}
	drv := runtimeapi.CgroupDriver_CGROUPFS
	if strings.EqualFold(info.Info.CgroupDriver, "systemd") {
		drv = runtimeapi.CgroupDriver_SYSTEMD
	}
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: drv}}, nil
}

// UpdateRuntimeConfig hands the node's pod CIDR to the network plugin
// (which may write a pod network configuration for it); on Docker's bridge
// network Docker owns addressing and there is nothing to change.
func (b *Backend) UpdateRuntimeConfig(_ context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	if b.opts.Network != nil {
		if err := b.opts.Network.UpdatePodCIDR(req.GetRuntimeConfig().GetNetworkConfig().GetPodCidr()); err != nil {
			return nil, networkStatus(err, "update pod CIDR", "-")
		}
	}
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

// CheckpointContainer is not offered: Docker's checkpoints need CRIU and experimental mode.
func (b *Backend) CheckpointContainer(context.Context, *runtimeapi.CheckpointContainerRequest) (*runtimeapi.CheckpointContainerResponse, error) {
	return nil, status.Error(codes.Unimplemented, "CheckpointContainer is not supported by the Docker backend")
}

// ListMetricDescriptors returns none: the Docker backend serves the
// CRI stats calls, not the Prometheus-style metrics ones.
func (b *Backend) ListMetricDescriptors(context.Context, *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	return &runtimeapi.ListMetricDescriptorsResponse{}, nil
}

// ListPodSandboxMetrics returns none, see ListMetricDescriptors.
func (b *Backend) ListPodSandboxMetrics(context.Context, *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	return &runtimeapi.ListPodSandboxMetricsResponse{}, nil
}
