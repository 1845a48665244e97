package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The API server is a client of every node's kubelet API (logs, exec,
// attach, port-forward, the node proxy). These name its identity there and
// the RBAC that lets the node (nodeapi) authorize it, the way kubeadm sets
// up a cluster.
const (
	// KubeletClientUser is the CN of the client certificate the API server
	// presents to nodes (--kubelet-client-certificate).
	KubeletClientUser = "kube-apiserver-kubelet-client"
	// KubeletClientGroup is that certificate's O; KubeletAPIAdminBinding
	// binds it to KubeletAPIAdminRole.
	KubeletClientGroup = "microlet:kubelet-api-admins"
	// KubeletAPIAdminRole is the built-in ClusterRole with every kubelet API
	// permission (nodes/proxy, nodes/log, nodes/stats, nodes/metrics, ...).
	KubeletAPIAdminRole = "system:kubelet-api-admin"
	// KubeletAPIAdminBinding is the ClusterRoleBinding EnsureKubeletAPIAccess
	// creates.
	KubeletAPIAdminBinding = "microlet:kubelet-api-admins"
	// KubeletPreferredAddressTypes is --kubelet-preferred-address-types:
	// the API server dials a node at its InternalIP first. The upstream
	// default starts with Hostname, which on these machines resolves to a
	// non-loopback address; test nodes use node IP 127.0.0.1.
	KubeletPreferredAddressTypes = "InternalIP,ExternalIP,Hostname,InternalDNS,ExternalDNS"
)

// Files in a PKI directory holding the API server's kubelet client
// credential. Exported because the compose dev box names them in the
// kube-apiserver's flags.
const (
	KubeletClientCertFile = "kubelet-client.crt"
	KubeletClientKeyFile  = "kubelet-client.key"
)

// KubeletClientFlags are the kube-apiserver flags that make it a kubelet
// API client with the credential in pkiDir (KubeletClientCertFile,
// KubeletClientKeyFile). With verifyServingCerts the API server also
// checks each node's serving certificate against pkiDir's CA
// (--kubelet-certificate-authority); without it, as in kubeadm's default,
// a node may serve a self-signed certificate. The test control plane, the
// dev control plane and the compose dev box all use these flags.
func KubeletClientFlags(pkiDir string, verifyServingCerts bool) []string {
	flags := []string{
		"--kubelet-client-certificate=" + filepath.Join(pkiDir, KubeletClientCertFile),
		"--kubelet-client-key=" + filepath.Join(pkiDir, KubeletClientKeyFile),
		"--kubelet-preferred-address-types=" + KubeletPreferredAddressTypes,
	}
	if verifyServingCerts {
		flags = append(flags, "--kubelet-certificate-authority="+filepath.Join(pkiDir, caCertFile))
	}
	return flags
}

// EnsureKubeletAPIAccess binds KubeletClientGroup to the built-in
// KubeletAPIAdminRole, so a node that authorizes requests through
// SubjectAccessReview (as the kubelet and nodeapi do) lets the API server
// in. It is idempotent: an existing binding is corrected if its subjects
// differ, and an unexpected roleRef (immutable) is an error.
func EnsureKubeletAPIAccess(ctx context.Context, cs kubernetes.Interface) error {
	return ensureGroupBinding(ctx, cs, KubeletAPIAdminBinding, KubeletAPIAdminRole, KubeletClientGroup)
}

// ensureGroupBinding makes the ClusterRoleBinding name bind group to the
// ClusterRole role: created when missing, its subjects corrected when
// they differ, an error when it refers to another role (roleRef is
// immutable).
func ensureGroupBinding(ctx context.Context, cs kubernetes.Interface, name, role, group string) error {
	want := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: group}},
	}
	crbs := cs.RbacV1().ClusterRoleBindings()
	_, err := crbs.Create(ctx, want, metav1.CreateOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create clusterrolebinding %s: %w", want.Name, err)
	}
	got, err := crbs.Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get clusterrolebinding %s: %w", want.Name, err)
	}
	if got.RoleRef != want.RoleRef {
		return fmt.Errorf("clusterrolebinding %s refers to %s %s, want %s %s", want.Name, got.RoleRef.Kind, got.RoleRef.Name, want.RoleRef.Kind, want.RoleRef.Name)
	}
	if slices.Equal(got.Subjects, want.Subjects) {
		return nil
	}
	got.Subjects = want.Subjects
	if _, err := crbs.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update clusterrolebinding %s: %w", want.Name, err)
	}
	return nil
}
