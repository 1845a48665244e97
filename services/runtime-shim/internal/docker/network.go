package docker

import (
	"context"
	"errors"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/services/runtime-shim/internal/checkpoint"
	"github.com/microlet/microlet/services/runtime-shim/internal/cni"
)

// NetworkPlugin attaches pod sandboxes to a network other than Docker's
// bridge (package cni). With one, pod-network sandboxes are pause
// containers with Docker's network mode none, attached after they start.
type NetworkPlugin interface {
	// Status is nil when sandboxes can be attached, else why not.
	Status() error
	// SetUp attaches the sandbox whose pause process is pid.
	SetUp(ctx context.Context, sandboxID string, pid int, c *runtimeapi.PodSandboxConfig) error
	// TearDown detaches the sandbox; nothing to detach is no error.
	TearDown(ctx context.Context, sandboxID string) error
	// PodIPs are the sandbox's addresses, the primary one first.
	PodIPs(sandboxID string) []string
	// Check is nil when the sandbox's attachment is complete and in place.
	Check(ctx context.Context, sandboxID string) error
	// Sandboxes lists the sandboxes the plugin holds state for.
	Sandboxes() []string
	// UpdatePodCIDR takes the node's pod CIDRs (comma-separated).
	UpdatePodCIDR(cidrs string) error
}

// Network reasons of the runtime status, the kubelet's words.
const (
	reasonNetworkNotReady = "NetworkPluginNotReady"
)

// networkStatus maps a plugin error onto the CRI's codes.
func networkStatus(err error, what, id string) error {
	var inv *cni.InvalidArgumentError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &inv):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, cni.ErrNotReady):
		return status.Errorf(codes.FailedPrecondition, "%s of sandbox %s: %v", what, id, err)
	case errors.Is(err, context.DeadlineExceeded):
		return status.Errorf(codes.DeadlineExceeded, "%s of sandbox %s: %v", what, id, err)
	case errors.Is(err, context.Canceled):
		return status.Errorf(codes.Canceled, "%s of sandbox %s: %v", what, id, err)
	}
	return status.Errorf(codes.Unknown, "%s of sandbox %s: %v", what, id, err)
}

// attachNetwork attaches a started pod-network sandbox through the plugin.
func (b *Backend) attachNetwork(ctx context.Context, id string, c *runtimeapi.PodSandboxConfig) error {
	ins, err := b.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return toStatus(err, "inspect sandbox %s", id)
	}
	pid := 0
	if ins.Container.State != nil && ins.Container.State.Running {
		pid = ins.Container.State.Pid
	}
	if pid <= 0 {
		return status.Errorf(codes.Unknown, "set up pod network of sandbox %s: the pause container is not running", id)
	}
	return networkStatus(b.opts.Network.SetUp(ctx, id, pid, c), "set up pod network", id)
}

// detachNetwork tears the sandbox's network down (before its pause
// container stops, so the plugins still find the namespace's devices).
func (b *Backend) detachNetwork(ctx context.Context, id string) error {
	if b.opts.Network == nil {
		return nil
	}
	return networkStatus(b.opts.Network.TearDown(ctx, id), "tear down pod network", id)
}

// networkReady is the NetworkReady condition's status, reason and message.
func (b *Backend) networkReady() (bool, string, string) {
	if b.opts.Network == nil {
		return true, "", ""
	}
	if err := b.opts.Network.Status(); err != nil {
		return false, reasonNetworkNotReady, err.Error()
	}
	return true, "", ""
}

// reconcileNetwork tears down attachments whose sandbox the shim no longer
// knows (no checkpoint): a crash between removing a sandbox and its
// network, or during a failed RunPodSandbox.
func (b *Backend) reconcileNetwork(ctx context.Context) {
	if b.opts.Network == nil {
		return
	}
	for _, id := range b.opts.Network.Sandboxes() {
		if _, err := b.cp.Get(id); !errors.Is(err, checkpoint.ErrNotFound) {
			continue
		}
		if _, err := b.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); err == nil || !cerrdefs.IsNotFound(err) {
			continue
		}
		if err := b.opts.Network.TearDown(ctx, id); err != nil {
			b.log.Warn("tear down the network of a removed sandbox", "sandbox", id, "err", err)
			continue
		}
		b.log.Info("tore down the network of a removed sandbox", "sandbox", id)
	}
}
