// Package securitycontext turns a pod's and a container's security contexts
// into the CRI's Linux security contexts the way the kubelet does
// (pkg/kubelet/kuberuntime/security_context.go and pkg/securitycontext):
// container fields override pod fields, the image's user fills an unset
// runAsUser, fsGroup joins the supplemental groups, allowPrivilegeEscalation
// false becomes no_new_privs, and the seccomp profile comes from the
// container, else the pod, else the node's default.
//
//	sc, err := securitycontext.Container(pod, c, securitycontext.ImageUser{UID: uid}, opts)
//	sbsc := securitycontext.Sandbox(pod, opts)
//	if err := securitycontext.VerifyNonRoot(pod, c, user); err != nil { /* CreateContainerConfigError */ }
package securitycontext
