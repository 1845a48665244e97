package docker

import (
	"context"
	"slices"
	"strings"

	"github.com/moby/moby/api/types/system"
	"github.com/moby/moby/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Runtime handlers (a RuntimeClass's handler, the CRI's
// RunPodSandboxRequest.runtime_handler) are the Docker daemon's OCI
// runtimes, by the names its daemon.json gives them (`docker info`'s
// Runtimes: runc, io.containerd.runc.v2, runsc for gVisor when installed,
// ...). The empty handler is the daemon's default runtime. A sandbox keeps
// its handler in its checkpoint and every container of the pod runs with
// the same runtime, as containerd runs a pod's containers under its
// sandbox's runtime.

// runtimeNames is the sorted list of a daemon's runtime names.
func runtimeNames(rts map[string]system.RuntimeWithStatus) []string {
	names := make([]string, 0, len(rts))
	for n := range rts {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// runtimeHandlers is the Status answer's handler list: the default handler
// and each of the daemon's runtimes a RuntimeClass can name, all with the
// daemon's features. A RuntimeClass handler is a DNS label, so Docker's
// built-in aliases with dots (io.containerd.runc.v2) are left out of the
// list, though a CRI client may still run a sandbox with them. Docker's
// user namespaces are daemon-wide, not per pod, so that feature is false.
func (b *Backend) runtimeHandlers(ctx context.Context) []*runtimeapi.RuntimeHandler {
	f, err := b.features(ctx)
	if err != nil {
		return nil
	}
	out := make([]*runtimeapi.RuntimeHandler, 0, 1+len(f.runtimes))
	for _, name := range append([]string{""}, f.runtimes...) {
		if name != "" && len(validation.IsDNS1123Label(name)) > 0 {
			continue
		}
		out = append(out, &runtimeapi.RuntimeHandler{Name: name, Features: &runtimeapi.RuntimeHandlerFeatures{
			RecursiveReadOnlyMounts: f.recursiveReadOnly(),
		}})
	}
	return out
}

// checkRuntimeHandler refuses a handler the daemon has no runtime for. The
// runtime list is read once with the other features; a handler not in it
// makes the shim ask the daemon again, so a runtime added to daemon.json
// (and the daemon reloaded) is found without restarting the shim.
func (b *Backend) checkRuntimeHandler(ctx context.Context, handler string) error {
	if handler == "" {
		return nil
	}
	f, err := b.features(ctx)
	if err != nil {
		return err
	}
	if slices.Contains(f.runtimes, handler) {
		return nil
	}
	info, err := b.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return toStatus(err, "docker info")
	}
	names := runtimeNames(info.Info.Runtimes)
	if !slices.Equal(names, f.runtimes) {
		g := *f
		g.runtimes = names
		b.feat.Store(&g)
	}
	if slices.Contains(names, handler) {
		return nil
	}
	return status.Errorf(codes.InvalidArgument, "runtime_handler: %q is not a runtime of the Docker daemon (it has %s; runtimes are added in its daemon.json)",
		handler, strings.Join(names, ", "))
}
