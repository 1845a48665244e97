package volumes

import (
	"context"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ClientTokens asks the API server's TokenRequest API, with the node's
// identity, for tokens bound to the pod (NodeRestriction admits exactly those
// for the service accounts of pods bound to this node).
type ClientTokens struct {
	Client kubernetes.Interface
}

var _ Tokens = ClientTokens{}

// Token implements Tokens.
func (c ClientTokens) Token(ctx context.Context, pod *corev1.Pod, audience string, expirationSeconds int64) (string, time.Time, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &expirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if audience != "" {
		req.Spec.Audiences = []string{audience}
	}
	resp, err := c.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return "", time.Time{}, err
	}
	return resp.Status.Token, resp.Status.ExpirationTimestamp.Time, nil
}
