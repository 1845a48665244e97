package envvars

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ClientSource reads objects straight from the API server with the node's
// own identity; the Node authorizer admits exactly the objects referenced by
// pods bound to this node. Reads happen when a container is created, so a
// ConfigMap created late is seen on the next sync.
type ClientSource struct {
	Client kubernetes.Interface
}

var _ Source = ClientSource{}

// ConfigMap implements Source.
func (s ClientSource) ConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	return s.Client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
}

// Secret implements Source.
func (s ClientSource) Secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	return s.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
}
