package podruntime

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/microlet/microlet/services/podsyncd/internal/pullsecrets"
)

// failedToRetrieveImagePullSecret is the kubelet's warning when a pod's
// pull secret cannot be read.
const failedToRetrieveImagePullSecret = "FailedToRetrieveImagePullSecret"

// Credentials are a source of the node's own image credentials (docker
// config files, credential provider plugins): registry location →
// credentials for an image.
type Credentials interface {
	Provide(ctx context.Context, image string) map[string]pullsecrets.Entry
}

// pullAuths are the credentials to try for image: the pod's image pull
// secrets' first, then the node's (docker config files, credential
// provider plugins), as the kubelet's union keyring; none means an
// anonymous pull.
func (m *Manager) pullAuths(ctx context.Context, pod *corev1.Pod, image string) []pullsecrets.Cred {
	repo, err := pullsecrets.Repository(image)
	if err != nil {
		return nil // the pull itself reports the bad name
	}
	var out []pullsecrets.Cred
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
	for _, src := range m.opts.Credentials {
		var k pullsecrets.Keyring
		if err := k.Add(src.Provide(ctx, image)); err != nil {
			m.log.Warn("node credential entry not usable", "image", image, "err", err)
		}
		out = append(out, k.Lookup(repo)...)
	}
	return out
}

// podSecrets are the pull secrets among creds (the pod's credentials for
// pull-credential verification).
func podSecrets(creds []pullsecrets.Cred) []kubeletv1beta1.ImagePullSecret {
	var out []kubeletv1beta1.ImagePullSecret
	for _, c := range creds {
		if c.Secret != nil {
			out = append(out, kubeletv1beta1.ImagePullSecret{UID: c.Secret.UID, Namespace: c.Secret.Namespace, Name: c.Secret.Name, CredentialHash: c.Hash})
		}
	}
	return out
}

// pulledWith is what a pull record says of the credential that worked:
// its secret, or access for every pod (node credentials, or none).
func pulledWith(c *pullsecrets.Cred) *kubeletv1beta1.ImagePullCredentials {
	if c == nil || c.Secret == nil {
		return &kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true}
	}
	return &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: podSecrets([]pullsecrets.Cred{*c})}
}

// pull pulls with each credential in turn until one works, as the kubelet
// does (anonymously when there are none), and returns the one that
// worked (nil: anonymous); the error aggregates every attempt's.
func (m *Manager) pull(ctx context.Context, spec *runtimeapi.ImageSpec, creds []pullsecrets.Cred) (string, *pullsecrets.Cred, error) {
	if len(creds) == 0 {
		ref, err := m.img.PullImage(ctx, spec, nil, nil)
		return ref, nil, err
	}
	var errs []error
	for i := range creds {
		ref, err := m.img.PullImage(ctx, spec, creds[i].Auth, nil)
		if err == nil {
			return ref, &creds[i], nil
		}
		errs = append(errs, err)
	}
	return "", nil, utilerrors.NewAggregate(errs)
}
