package pullsecrets

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// Secrets reads Secrets (podsyncd reads them with the node's identity).
type Secrets interface {
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// ForPod builds the keyring of the pod's spec.imagePullSecrets (the
// admission plugin has already copied the service account's there). It
// also returns the names of the secrets it could not read and the errors of
// those it could not use, for the kubelet's FailedToRetrieveImagePullSecret
// warning and the log; the pull goes on with what is left.
func ForPod(ctx context.Context, src Secrets, pod *corev1.Pod) (k *Keyring, failed []string, errs []error) {
	k = &Keyring{}
	if src == nil {
		return k, nil, nil
	}
	for _, ref := range pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			continue
		}
		s, err := src.Secret(ctx, pod.Namespace, ref.Name)
		if err != nil {
			failed = append(failed, ref.Name)
			errs = append(errs, err)
			continue
		}
		if err := k.AddSecret(s); err != nil {
			errs = append(errs, err)
		}
	}
	return k, failed, errs
}
