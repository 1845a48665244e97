package docker

import (
	"context"
	"fmt"
	"strings"

	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"github.com/moby/moby/client/pkg/versions"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/version"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Recursive read-only mounts (the CRI's Mount.recursive_read_only, which
// the kubelet sets for volumeMounts[].recursiveReadOnly). Docker makes a
// bind read-only all the way down only through its mount API's
// BindOptions.ReadOnlyForceRecursive, added in API 1.44 (Docker Engine
// 25), and only on kernels with mount_setattr (5.12). The same API version
// turned every read-only bind recursive where possible, so from 1.44 on a
// mount the CRI wants read-only at its top alone must say
// ReadOnlyNonRecursive; before it, Binds' "ro" is that already.
const (
	// bindOptionsAPI is the first Docker API with the read-only BindOptions.
	bindOptionsAPI = "1.44"
	rroKernelMajor = 5
	rroKernelMinor = 12
)

// daemonFeatures is what the Docker daemon offers beyond API 1.41, read
// once it answers: the API version the client negotiated with it, the
// daemon's kernel and its OCI runtimes (handlers.go).
type daemonFeatures struct {
	apiVersion string
	kernel     string
	// runtimes are the names of the daemon's OCI runtimes, sorted.
	runtimes []string
}

// bindOptions says whether the negotiated API knows the read-only
// BindOptions, and so needs them for a non-recursive read-only bind.
func (f *daemonFeatures) bindOptions() bool {
	return versions.GreaterThanOrEqualTo(f.apiVersion, bindOptionsAPI)
}

// recursiveReadOnly says whether the daemon can make a bind recursively
// read-only: API 1.44 and a kernel with mount_setattr. (Docker also asks
// its OCI runtime, runc 1.1 or later, and refuses the container itself
// when that one cannot.)
func (f *daemonFeatures) recursiveReadOnly() bool {
	return f.bindOptions() && kernelAtLeast(f.kernel, rroKernelMajor, rroKernelMinor)
}

// unsupportedRRO is the error for a recursive read-only mount the daemon
// cannot make.
func (f *daemonFeatures) unsupportedRRO(field string) error {
	return status.Errorf(codes.InvalidArgument,
		"%s: recursive read-only mounts are not supported by this runtime: Docker API %s on kernel %s (they need Docker API %s, Docker Engine 25, and kernel %d.%d)",
		field, f.apiVersion, f.kernel, bindOptionsAPI, rroKernelMajor, rroKernelMinor)
}

func kernelAtLeast(release string, major, minor uint) bool {
	v, err := version.ParseGeneric(strings.TrimSpace(release))
	if err != nil {
		return false
	}
	return v.AtLeast(version.MajorMinor(major, minor))
}

// features reads the daemon's features once it answers and keeps them:
// the client keeps the API version it negotiated, so what it can ask for
// does not change while the shim runs.
func (b *Backend) features(ctx context.Context) (*daemonFeatures, error) {
	if f := b.feat.Load(); f != nil {
		return f, nil
	}
	if _, err := b.cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return nil, toStatus(err, "docker ping")
	}
	info, err := b.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return nil, toStatus(err, "docker info")
	}
	f := &daemonFeatures{apiVersion: b.cli.ClientVersion(), kernel: info.Info.KernelVersion, runtimes: runtimeNames(info.Info.Runtimes)}
	b.feat.Store(f)
	return f, nil
}

// validateRRO checks what a recursive read-only mount needs whatever the
// daemon: read-only, and private propagation (a recursively read-only tree
// cannot receive or send mounts).
func validateRRO(field string, m *runtimeapi.Mount) error {
	if !m.RecursiveReadOnly {
		return nil
	}
	if !m.Readonly {
		return invalid(field+".recursive_read_only", "needs readonly")
	}
	if m.Propagation != runtimeapi.MountPropagation_PROPAGATION_PRIVATE {
		return invalid(field+".recursive_read_only", fmt.Sprintf("needs private propagation, not %s", m.Propagation))
	}
	return nil
}

// bindMount is a read-only host mount in the mount API with BindOptions
// saying how far down it is read-only; Binds cannot say it. The mount
// point is created when missing, as Binds create it.
func bindMount(m *runtimeapi.Mount, propagation mount.Propagation) mount.Mount {
	return mount.Mount{
		Type: mount.TypeBind, Source: m.HostPath, Target: m.ContainerPath, ReadOnly: true,
		BindOptions: &mount.BindOptions{
			Propagation:            propagation,
			CreateMountpoint:       true,
			ReadOnlyNonRecursive:   !m.RecursiveReadOnly,
			ReadOnlyForceRecursive: m.RecursiveReadOnly,
		},
	}
}

// needsFeatures says whether creating c depends on the daemon's features:
// a recursive read-only mount, or any read-only host mount (whose form
// depends on the API version).
func needsFeatures(c *runtimeapi.ContainerConfig) bool {
	for _, m := range c.Mounts {
		if m.Readonly && m.GetImage().GetImage() == "" {
			return true
		}
	}
	return false
}
