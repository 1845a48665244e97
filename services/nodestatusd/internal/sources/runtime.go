package sources

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/criclient"
)

// CallTimeout bounds each call to a source; a hung daemon must not hold up
// the node's heartbeat.
const CallTimeout = 2 * time.Second

// RuntimeState is one reading of the CRI runtime.
type RuntimeState struct {
	// Err is set when the runtime could not be asked at all; it names the endpoint.
	Err error
	// RuntimeName and RuntimeVersion come from Version.
	RuntimeName, RuntimeVersion string
	// RuntimeReady and NetworkReady are the CRI Status conditions as errors
	// (nil when true), worded as the kubelet words them.
	RuntimeReady, NetworkReady error
	// Handlers are the runtime's handlers and their features, sorted by
	// name, from a ready runtime's Status (the kubelet keeps them only
	// then); nil otherwise.
	Handlers []corev1.NodeRuntimeHandler
	// Features are the runtime's features (SupplementalGroupsPolicy) from
	// a ready runtime's Status; nil when it reports none or is not ready.
	Features *corev1.NodeFeatures
	// Images come from ListImages, largest first.
	Images []corev1.ContainerImage
	// ImagesErr is set when ListImages failed; images are then left alone.
	ImagesErr error
}

// ContainerRuntimeVersion is "<name>://<version>" as NodeInfo carries it.
func (s RuntimeState) ContainerRuntimeVersion() string {
	if s.RuntimeName == "" {
		return ""
	}
	return s.RuntimeName + "://" + s.RuntimeVersion
}

// Runtime is a cached CRI client.
type Runtime struct {
	endpoint, imageEndpoint string
	maxAge                  time.Duration
	now                     func() time.Time

	// connMu guards rt and img, k8s.io/cri-client's remote services (the
	// kubelet's CRI client), set once the runtime has answered.
	connMu sync.Mutex
	rt     internalapi.RuntimeService
	img    internalapi.ImageManagerService

	// cidrMu guards podCIDR, the pod CIDRs the runtime last accepted.
	cidrMu  sync.Mutex
	podCIDR string

	mu   sync.Mutex
	last RuntimeState
	at   time.Time
	// good is the latest reading the runtime answered, and goodAt when.
	good   RuntimeState
	goodAt time.Time
}

// DownThreshold is how long the runtime may fail to answer before it is
// reported down: the kubelet's 30 s, so one slow call on a busy node does not
// flip the Node NotReady.
const DownThreshold = 30 * time.Second

// NewRuntime returns a CRI source; imageEndpoint empty means the runtime's.
// Readings younger than maxAge are reused.
func NewRuntime(endpoint, imageEndpoint string, maxAge time.Duration) *Runtime {
	if imageEndpoint == "" {
		imageEndpoint = endpoint
	}
	return &Runtime{endpoint: endpoint, imageEndpoint: imageEndpoint, maxAge: maxAge, now: time.Now}
}

// Endpoint is the runtime endpoint this source reads.
func (r *Runtime) Endpoint() string { return r.endpoint }

// connect makes the remote runtime and image services on first use and
// again after a failure, through criclient.TryConnect: one attempt per
// reading, bounded by CallTimeout, that leaves no connection behind when the
// runtime does not answer (cri-client's constructors alone would leave one
// per failed attempt).
func (r *Runtime) connect(ctx context.Context) (internalapi.RuntimeService, internalapi.ImageManagerService, error) {
	r.connMu.Lock()
	defer r.connMu.Unlock()
	if r.rt != nil {
		return r.rt, r.img, nil
	}
	svc, err := criclient.TryConnect(ctx, r.endpoint, r.imageEndpoint, CallTimeout, CallTimeout)
	if err != nil {
		return nil, nil, err
	}
	r.rt, r.img = svc.Runtime, svc.Images
	return r.rt, r.img, nil
}

// Close releases the connections.
func (r *Runtime) Close() {
	r.connMu.Lock()
	defer r.connMu.Unlock()
	if r.rt != nil {
		_ = r.rt.Close(context.Background())
		_ = r.img.Close(context.Background())
		r.rt, r.img = nil, nil
	}
}

// Get returns a reading no older than maxAge, asking the runtime when needed.
func (r *Runtime) Get(ctx context.Context) RuntimeState {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.at.IsZero() && r.now().Sub(r.at) < r.maxAge {
		return r.last
	}
	st := r.read(ctx)
	now := r.now()
	switch {
	case st.Err == nil:
		r.good, r.goodAt = st, now
	case !r.goodAt.IsZero() && now.Sub(r.goodAt) < DownThreshold:
		st = r.good
	}
	r.last, r.at = st, now
	return r.last
}

// UpdatePodCIDR hands the Node's pod CIDRs (comma-separated) to the
// runtime through UpdateRuntimeConfig, as the kubelet's updatePodCIDR
// does: only when they differ from what the runtime last accepted, so a
// failed call is repeated by the next sync.
func (r *Runtime) UpdatePodCIDR(ctx context.Context, cidrs string) error {
	r.cidrMu.Lock()
	defer r.cidrMu.Unlock()
	if cidrs == r.podCIDR {
		return nil
	}
	rt, _, err := r.connect(ctx)
	if err != nil {
		return fmt.Errorf("container runtime at %s: %w", r.endpoint, err)
	}
	err = rt.UpdateRuntimeConfig(ctx, &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: cidrs}})
	if err != nil {
		return fmt.Errorf("update pod CIDR %s at %s: %w", cidrs, r.endpoint, err)
	}
	r.podCIDR = cidrs
	return nil
}

func (r *Runtime) read(ctx context.Context) RuntimeState {
	var st RuntimeState
	rt, img, err := r.connect(ctx)
	if err != nil {
		st.Err = fmt.Errorf("container runtime is down: %s did not answer: %w", r.endpoint, err)
		return st
	}
	// Each call is bounded by CallTimeout inside cri-client.
	v, err := rt.Version(ctx, "")
	if err != nil {
		st.Err = fmt.Errorf("container runtime is down: %s did not answer: %w", r.endpoint, err)
		return st
	}
	st.RuntimeName, st.RuntimeVersion = v.GetRuntimeName(), v.GetRuntimeVersion()
	status, err := rt.Status(ctx, false)
	if err != nil {
		st.Err = fmt.Errorf("container runtime status check may not have completed yet: %s: %w", r.endpoint, err)
		return st
	}
	if status.GetStatus() == nil {
		st.Err = fmt.Errorf("container runtime status check may not have completed yet: %s returned no status", r.endpoint)
		return st
	}
	st.RuntimeReady = conditionErr(status.GetStatus(), runtimeapi.RuntimeReady, "container runtime not ready")
	st.NetworkReady = conditionErr(status.GetStatus(), runtimeapi.NetworkReady, "container runtime network not ready")
	if st.RuntimeReady == nil {
		st.Handlers = RuntimeHandlers(status.GetRuntimeHandlers())
		if f := status.GetFeatures(); f != nil {
			sgp := f.GetSupplementalGroupsPolicy()
			st.Features = &corev1.NodeFeatures{SupplementalGroupsPolicy: &sgp}
		}
	}
	imgs, err := img.ListImages(ctx, nil)
	if err != nil {
		st.ImagesErr = fmt.Errorf("list images at %s: %w", r.imageEndpoint, err)
		return st
	}
	st.Images = ContainerImages(imgs)
	return st
}

// conditionErr is nil when the named CRI condition is true, else an error
// in the kubelet's wording ("<what>: NetworkReady=false reason:... message:...").
func conditionErr(s *runtimeapi.RuntimeStatus, typ, what string) error {
	for _, c := range s.GetConditions() {
		if c.GetType() != typ {
			continue
		}
		if c.GetStatus() {
			return nil
		}
		return fmt.Errorf("%s: %s=false reason:%s message:%s", what, typ, c.GetReason(), c.GetMessage())
	}
	return fmt.Errorf("%s: %s condition missing", what, typ)
}

// ContainerImages converts CRI images into the Node's form, largest first
// and images of equal size by descending ID (the kubelet's order: the cap
// keeps the images that matter most for scheduling, and a runtime listing
// equal-size images in another order is no change to write), with repo
// tags before repo digests.
func ContainerImages(in []*runtimeapi.Image) []corev1.ContainerImage {
	sorted := slices.Clone(in)
	slices.SortFunc(sorted, func(a, b *runtimeapi.Image) int {
		if c := cmp.Compare(b.GetSize(), a.GetSize()); c != 0 {
			return c
		}
		return cmp.Compare(b.GetId(), a.GetId())
	})
	out := make([]corev1.ContainerImage, 0, len(sorted))
	for _, img := range sorted {
		names := append(append([]string{}, img.GetRepoTags()...), img.GetRepoDigests()...)
		if len(names) == 0 {
			continue
		}
		out = append(out, corev1.ContainerImage{Names: names, SizeBytes: int64(img.GetSize())}) //nolint:gosec // image sizes fit
	}
	return out
}

// RuntimeHandlers converts the CRI's runtime handlers into the Node's
// form, sorted by name as the kubelet sorts them (so a runtime listing
// them in another order is no change to write); a handler without
// features has none of them.
func RuntimeHandlers(in []*runtimeapi.RuntimeHandler) []corev1.NodeRuntimeHandler {
	out := make([]corev1.NodeRuntimeHandler, 0, len(in))
	for _, h := range in {
		rro, userns := h.GetFeatures().GetRecursiveReadOnlyMounts(), h.GetFeatures().GetUserNamespaces()
		out = append(out, corev1.NodeRuntimeHandler{Name: h.GetName(), Features: &corev1.NodeRuntimeHandlerFeatures{
			RecursiveReadOnlyMounts: &rro, UserNamespaces: &userns,
		}})
	}
	slices.SortStableFunc(out, func(a, b corev1.NodeRuntimeHandler) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
