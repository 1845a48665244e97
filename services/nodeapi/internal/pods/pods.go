package pods

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/internal/podsource"
	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
)

// ErrNotFound is returned by Get for a pod this node does not run.
var ErrNotFound = errors.New("pod not found")

// Getter finds one pod by namespace and name.
type Getter interface {
	// Get returns the pod with its latest status, or an error wrapping
	// ErrNotFound.
	Get(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// Lister lists the pods this node runs.
type Lister interface {
	// List returns the pods with their latest statuses, sorted by namespace
	// and name.
	List(ctx context.Context) ([]*corev1.Pod, error)
}

// Source reads pods from podconfig and their statuses from statusd on every
// call, so answers are never older than those two services' own state.
type Source struct {
	config podconfigv1.PodConfigServiceClient
	status statusdv1.StatusServiceClient
}

var (
	_ Getter = (*Source)(nil)
	_ Lister = (*Source)(nil)
)

// NewSource returns a Source over the two services' clients.
func NewSource(config podconfigv1.PodConfigServiceClient, status statusdv1.StatusServiceClient) *Source {
	return &Source{config: config, status: status}
}

// List implements Lister.
func (s *Source) List(ctx context.Context) ([]*corev1.Pod, error) {
	desired, err := s.desired(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := s.status.ListPodStatuses(ctx, &statusdv1.ListPodStatusesRequest{})
	if err != nil {
		return nil, fmt.Errorf("statusd: list pod statuses: %w", err)
	}
	statuses := make(map[string][]byte, len(resp.GetEntries()))
	for _, e := range resp.GetEntries() {
		statuses[e.GetPodUid()] = e.GetStatus()
	}
	for _, p := range desired {
		if b, ok := statuses[string(p.UID)]; ok {
			if err := setStatus(p, b); err != nil {
				return nil, err
			}
		}
	}
	return desired, nil
}

// Get implements Getter.
func (s *Source) Get(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	desired, err := s.desired(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range desired {
		if p.Namespace != namespace || p.Name != name {
			continue
		}
		resp, err := s.status.GetPodStatus(ctx, &statusdv1.GetPodStatusRequest{PodUid: string(p.UID)})
		switch {
		case status.Code(err) == codes.NotFound:
			// Admitted but not synced yet: the kubelet answers with the
			// pod's own (empty) status then too.
		case err != nil:
			return nil, fmt.Errorf("statusd: pod status of %s/%s: %w", namespace, name, err)
		default:
			if err := setStatus(p, resp.GetEntry().GetStatus()); err != nil {
				return nil, err
			}
		}
		return p, nil
	}
	return nil, fmt.Errorf("%w: %s/%s", ErrNotFound, namespace, name)
}

// desired returns podconfig's pods without mirror pods, sorted.
func (s *Source) desired(ctx context.Context) ([]*corev1.Pod, error) {
	resp, err := s.config.ListPods(ctx, &podconfigv1.ListPodsRequest{})
	if err != nil {
		return nil, fmt.Errorf("podconfig: list pods: %w", err)
	}
	out := make([]*corev1.Pod, 0, len(resp.GetPods()))
	for _, sum := range resp.GetPods() {
		p := &corev1.Pod{}
		if err := p.Unmarshal(sum.GetPod()); err != nil {
			return nil, fmt.Errorf("podconfig: pod %s/%s: %w", sum.GetNamespace(), sum.GetName(), err)
		}
		if podsource.IsMirror(p) {
			continue
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

func setStatus(p *corev1.Pod, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	st := corev1.PodStatus{}
	if err := st.Unmarshal(b); err != nil {
		return fmt.Errorf("statusd: status of %s/%s: %w", p.Namespace, p.Name, err)
	}
	p.Status = st
	return nil
}
