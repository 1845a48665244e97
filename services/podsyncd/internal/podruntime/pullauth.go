package podruntime

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/services/podsyncd/internal/pullsecrets"
)

// failedToRetrieveImagePullSecret is the kubelet's warning when a pod's
// pull secret cannot be read.
const failedToRetrieveImagePullSecret = "FailedToRetrieveImagePullSecret"

// Credentials are the node's own image credentials (credential provider
// plugins): registry location → credentials for an image.
type Credentials interface {
	Provide(ctx context.Context, image string) map[string]pullsecrets.Entry
}

// pullAuths are the credentials to try for image: the pod's image pull
// secrets' first, then the node's (credential provider plugins), as the
// kubelet's union keyring; none means an anonymous pull.
func (m *Manager) pullAuths(ctx context.Context, pod *corev1.Pod, image string) []*runtimeapi.AuthConfig {
	repo, err := pullsecrets.Repository(image)
	if err != nil {
		return nil // the pull itself reports the bad name
	}
	var out []*runtimeapi.AuthConfig
	if len(pod.Spec.ImagePullSecrets) > 0 && m.opts.Objects != nil {
		k, failed, errs := pullsecrets.ForPod(ctx, m.opts.Objects, pod)
		if len(failed) > 0 {
			m.opts.Recorder.Eventf(pod, corev1.EventTypeWarning, failedToRetrieveImagePullSecret,
				"Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", strings.Join(failed, ", "))
		}
		for _, err := range errs {
			m.log.Warn("image pull secret not usable; the image pull may not succeed", "pod", podRef(pod), "err", err)
		}
		out = k.Lookup(repo)
	}
	if m.opts.Credentials != nil {
		var k pullsecrets.Keyring
		if err := k.Add(m.opts.Credentials.Provide(ctx, image)); err != nil {
			m.log.Warn("credential provider entry not usable", "image", image, "err", err)
		}
		out = append(out, k.Lookup(repo)...)
	}
	return out
}

// pull pulls with each credential in turn until one works, as the kubelet
// does (anonymously when there are none); the error aggregates every attempt's.
func (m *Manager) pull(ctx context.Context, spec *runtimeapi.ImageSpec, auths []*runtimeapi.AuthConfig) (*runtimeapi.PullImageResponse, error) {
	if len(auths) == 0 {
		return m.img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec})
	}
	var errs []error
	for _, a := range auths {
		resp, err := m.img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec, Auth: a})
		if err == nil {
			return resp, nil
		}
		errs = append(errs, err)
	}
	return nil, utilerrors.NewAggregate(errs)
}
