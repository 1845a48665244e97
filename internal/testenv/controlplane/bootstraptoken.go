package controlplane

import (
	"context"
	cryptorand "crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// Joining with a bootstrap token, as kubeadm sets it up: the apiserver
// authenticates tokens stored as Secrets of type bootstrap.kubernetes.io/token
// in kube-system as user system:bootstrap:<id> in group
// system:bootstrappers; that group may create CSRs (system:node-bootstrapper)
// and have its kubelet client CSRs approved (nodeclient); nodes may have
// their own renewed (selfnodeclient, EnsureNodeCertificateRotation).
const (
	// BootstrappersGroup is the group of every bootstrap token.
	BootstrappersGroup = "system:bootstrappers"
	// NodeBootstrapperRole lets its subjects create and read CSRs.
	NodeBootstrapperRole = "system:node-bootstrapper"
	// NodeClientApprovalRole lets kube-controller-manager approve its
	// subjects' kube-apiserver-client-kubelet CSRs.
	NodeClientApprovalRole = "system:certificates.k8s.io:certificatesigningrequests:nodeclient"
	// NodeBootstrapBinding and NodeBootstrapApprovalBinding are the
	// ClusterRoleBindings EnsureNodeBootstrap creates.
	NodeBootstrapBinding         = "microlet:kubelet-bootstrap"
	NodeBootstrapApprovalBinding = "microlet:node-autoapprove-bootstrap"
)

// EnsureNodeBootstrap binds BootstrappersGroup to NodeBootstrapperRole and
// NodeClientApprovalRole (kubeadm's kubelet-bootstrap and
// node-autoapprove-bootstrap bindings). It is idempotent. Start runs it
// when Options.BootstrapTokenAuth is set.
func EnsureNodeBootstrap(ctx context.Context, cs kubernetes.Interface) error {
	if err := ensureGroupBinding(ctx, cs, NodeBootstrapBinding, NodeBootstrapperRole, BootstrappersGroup); err != nil {
		return err
	}
	return ensureGroupBinding(ctx, cs, NodeBootstrapApprovalBinding, NodeClientApprovalRole, BootstrappersGroup)
}

// CreateBootstrapToken stores a new bootstrap token valid for ttl in
// kube-system and returns it ("<id>.<secret>"). The apiserver accepts it
// only with Options.BootstrapTokenAuth.
func (cp *ControlPlane) CreateBootstrapToken(ctx context.Context, ttl time.Duration) (string, error) {
	cs, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return "", err
	}
	return CreateBootstrapToken(ctx, cs, ttl)
}

// NewBootstrapToken returns a random (crypto/rand) token in the bootstrap-token format
// "<6 characters>.<16 characters>".
func NewBootstrapToken() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	pick := func(n int) string {
		b := make([]byte, n)
		_, _ = cryptorand.Read(b)
		for i := range b {
			b[i] = alphabet[int(b[i])%len(alphabet)]
		}
		return string(b)
	}
	return pick(6) + "." + pick(16)
}

// CreateBootstrapToken is ControlPlane.CreateBootstrapToken for any
// cluster cs administers.
func CreateBootstrapToken(ctx context.Context, cs kubernetes.Interface, ttl time.Duration) (string, error) {
	tok := NewBootstrapToken()
	if err := EnsureBootstrapToken(ctx, cs, tok, ttl); err != nil {
		return "", err
	}
	return tok, nil
}

// EnsureBootstrapToken stores token ("<id>.<secret>", NewBootstrapToken)
// in kube-system, valid for ttl from now; an existing one gets the new
// expiry. The compose dev box runs it on every start.
func EnsureBootstrapToken(ctx context.Context, cs kubernetes.Interface, token string, ttl time.Duration) error {
	id, secret, ok := strings.Cut(strings.TrimSpace(token), ".")
	if !ok || len(id) != 6 || len(secret) != 16 {
		return fmt.Errorf("bootstrap token %q: want <6 characters>.<16 characters>", token)
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: metav1.NamespaceSystem},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id":                       id,
			"token-secret":                   secret,
			"expiration":                     time.Now().Add(ttl).UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"usage-bootstrap-signing":        "true",
			"description":                    "microlet test control plane: node join",
		},
	}
	secrets := cs.CoreV1().Secrets(metav1.NamespaceSystem)
	_, err := secrets.Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("bootstrap token secret %s: %w", s.Name, err)
	}
	return nil
}

// WriteBootstrapKubeconfig writes a kubeconfig at path that authenticates
// with token (CreateBootstrapToken).
func (cp *ControlPlane) WriteBootstrapKubeconfig(path, token string) error {
	return WriteKubeconfig(path, cp.host, cp.pki.CACertPEM, "kubelet-bootstrap", nil, nil, token)
}

// ApproveKubeletServingCSRs approves, until ctx ends, every pending
// kubernetes.io/kubelet-serving CSR that a node made for itself: requested
// by system:node:<name> in system:nodes, subject system:node:<name> /
// system:nodes, with server-auth usage only. kube-controller-manager does
// not approve these (the names and addresses in them are the node's word),
// so a cluster operator or an approver does; this is that approver for
// tests. It polls every interval.
func ApproveKubeletServingCSRs(ctx context.Context, cs kubernetes.Interface, interval time.Duration) {
	_ = wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{
			FieldSelector: "spec.signerName=" + certificatesv1.KubeletServingSignerName,
		})
		if err != nil {
			return false, nil
		}
		for i := range list.Items {
			c := &list.Items[i]
			if decided(c) || servingRequestProblem(c) != nil {
				continue
			}
			c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
				Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
				Reason: "TestApprover", Message: "node serving certificate approved by the test control plane",
			})
			_, _ = cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, c.Name, c, metav1.UpdateOptions{})
		}
		return false, nil
	})
}

func decided(c *certificatesv1.CertificateSigningRequest) bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == certificatesv1.CertificateApproved || cond.Type == certificatesv1.CertificateDenied {
			return true
		}
	}
	return false
}

// servingRequestProblem is why c is not a node's request for its own
// serving certificate, or nil.
func servingRequestProblem(c *certificatesv1.CertificateSigningRequest) error {
	if !strings.HasPrefix(c.Spec.Username, "system:node:") || !slices.Contains(c.Spec.Groups, NodesGroup) {
		return fmt.Errorf("requested by %s, not a node", c.Spec.Username)
	}
	b, _ := pem.Decode(c.Spec.Request)
	if b == nil {
		return errors.New("no PEM request")
	}
	req, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return err
	}
	if req.Subject.CommonName != c.Spec.Username || !slices.Equal(req.Subject.Organization, []string{NodesGroup}) {
		return fmt.Errorf("subject %s is not the requester %s", req.Subject, c.Spec.Username)
	}
	for _, u := range c.Spec.Usages {
		switch u {
		case certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth:
		default:
			return fmt.Errorf("usage %s", u)
		}
	}
	return nil
}
