package controlplane

import (
	"context"

	"k8s.io/client-go/kubernetes"
)

// A node renews its client certificate with a CertificateSigningRequest of
// signer kubernetes.io/kube-apiserver-client-kubelet for its own name.
// kube-controller-manager's approver approves such a request only when
// the requester may create certificatesigningrequests/selfnodeclient; the
// built-in ClusterRole granting it is bound to no one by default. kubeadm
// binds it to every node, and so does Bootstrap.
const (
	// NodeCertRotationRole is the built-in ClusterRole allowing a node to
	// have its own client certificate renewed automatically.
	NodeCertRotationRole = "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"
	// NodeCertRotationBinding is the ClusterRoleBinding
	// EnsureNodeCertificateRotation creates, of group system:nodes.
	NodeCertRotationBinding = "microlet:node-autoapprove-certificate-rotation"
	// NodesGroup is the group of every node's credential.
	NodesGroup = "system:nodes"
)

// EnsureNodeCertificateRotation binds NodesGroup to NodeCertRotationRole,
// so that with kube-controller-manager running a node's CSR for its own
// client certificate is approved and signed without a person. It is
// idempotent like EnsureKubeletAPIAccess.
func EnsureNodeCertificateRotation(ctx context.Context, cs kubernetes.Interface) error {
	return ensureGroupBinding(ctx, cs, NodeCertRotationBinding, NodeCertRotationRole, NodesGroup)
}
