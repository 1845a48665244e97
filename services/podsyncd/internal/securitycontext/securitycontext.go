package securitycontext

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Options are the node's settings that shape every security context.
type Options struct {
	// SeccompProfileRoot is the directory Localhost seccomp profiles are
	// relative to (the kubelet's <root-dir>/seccomp).
	SeccompProfileRoot string
	// SeccompDefault gives containers without a seccomp profile the
	// runtime's default one instead of none (the kubelet's seccompDefault).
	SeccompDefault bool
}

// ImageUser is the user an image runs as, from the CRI's ImageStatus: a UID,
// or a name when the image's user is not numeric. Neither means root.
type ImageUser struct {
	UID      *int64
	Username string
}

// FromImage reads the image user out of a CRI image; nil (an unknown image)
// and an image without a user both run as root, as the kubelet assumes.
func FromImage(img *runtimeapi.Image) ImageUser {
	switch {
	case img != nil && img.Uid != nil:
		uid := img.Uid.Value
		return ImageUser{UID: &uid}
	case img != nil && img.Username != "":
		return ImageUser{Username: img.Username}
	}
	root := int64(0)
	return ImageUser{UID: &root}
}

// Effective merges the pod's security context into the container's:
// a field set on the container wins, the pod's fills the rest. The result is
// a new object; neither input is changed.
func Effective(pod *corev1.Pod, c *corev1.Container) *corev1.SecurityContext {
	out := &corev1.SecurityContext{}
	if psc := pod.Spec.SecurityContext; psc != nil {
		out.SELinuxOptions = psc.SELinuxOptions
		out.WindowsOptions = psc.WindowsOptions
		out.RunAsUser = psc.RunAsUser
		out.RunAsGroup = psc.RunAsGroup
		out.RunAsNonRoot = psc.RunAsNonRoot
		out.SeccompProfile = psc.SeccompProfile
		out.AppArmorProfile = psc.AppArmorProfile
	}
	csc := c.SecurityContext
	if csc == nil {
		return out.DeepCopy()
	}
	pick := func(dst **int64, src *int64) {
		if src != nil {
			*dst = src
		}
	}
	pickBool := func(dst **bool, src *bool) {
		if src != nil {
			*dst = src
		}
	}
	if csc.SELinuxOptions != nil {
		out.SELinuxOptions = csc.SELinuxOptions
	}
	if csc.Capabilities != nil {
		out.Capabilities = csc.Capabilities
	}
	if csc.ProcMount != nil {
		out.ProcMount = csc.ProcMount
	}
	if csc.SeccompProfile != nil {
		out.SeccompProfile = csc.SeccompProfile
	}
	if csc.AppArmorProfile != nil {
		out.AppArmorProfile = csc.AppArmorProfile
	}
	pick(&out.RunAsUser, csc.RunAsUser)
	pick(&out.RunAsGroup, csc.RunAsGroup)
	pickBool(&out.RunAsNonRoot, csc.RunAsNonRoot)
	pickBool(&out.Privileged, csc.Privileged)
	pickBool(&out.ReadOnlyRootFilesystem, csc.ReadOnlyRootFilesystem)
	pickBool(&out.AllowPrivilegeEscalation, csc.AllowPrivilegeEscalation)
	return out.DeepCopy()
}

// Seccomp is the CRI seccomp profile of a container (c may be nil for the
// pod-level profile): the container's field, else the pod's, else
// RuntimeDefault when the node defaults to it, else Unconfined.
func Seccomp(pod *corev1.Pod, c *corev1.Container, opts Options) (*runtimeapi.SecurityProfile, error) {
	var p *corev1.SeccompProfile
	if c != nil && c.SecurityContext != nil && c.SecurityContext.SeccompProfile != nil {
		p = c.SecurityContext.SeccompProfile
	} else if psc := pod.Spec.SecurityContext; psc != nil {
		p = psc.SeccompProfile
	}
	if p == nil {
		if opts.SeccompDefault {
			return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	}
	switch p.Type {
	case corev1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case corev1.SeccompProfileTypeLocalhost:
		if p.LocalhostProfile == nil || *p.LocalhostProfile == "" {
			return nil, errors.New("localhostProfile must be set if seccompProfile type is Localhost")
		}
		rel := filepath.Clean(*p.LocalhostProfile)
		if filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
			return nil, fmt.Errorf("seccomp localhostProfile %q must be a relative path inside the seccomp profile root", *p.LocalhostProfile)
		}
		if opts.SeccompProfileRoot == "" {
			return nil, fmt.Errorf("seccomp localhostProfile %q: this node has no seccomp profile root configured", *p.LocalhostProfile)
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: filepath.Join(opts.SeccompProfileRoot, rel)}, nil
	}
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
}

// supplementalGroups is fsGroup followed by the pod's supplemental groups,
// the order the kubelet hands them to the runtime.
func supplementalGroups(pod *corev1.Pod) []int64 {
	psc := pod.Spec.SecurityContext
	if psc == nil {
		return nil
	}
	var out []int64
	if psc.FSGroup != nil {
		out = append(out, *psc.FSGroup)
	}
	return append(out, psc.SupplementalGroups...)
}

func groupsPolicy(pod *corev1.Pod) (runtimeapi.SupplementalGroupsPolicy, error) {
	psc := pod.Spec.SecurityContext
	if psc == nil || psc.SupplementalGroupsPolicy == nil {
		return runtimeapi.SupplementalGroupsPolicy_Merge, nil
	}
	v, ok := runtimeapi.SupplementalGroupsPolicy_value[string(*psc.SupplementalGroupsPolicy)]
	if !ok {
		return 0, fmt.Errorf("unsupported supplementalGroupsPolicy: %s", *psc.SupplementalGroupsPolicy)
	}
	return runtimeapi.SupplementalGroupsPolicy(v), nil
}

// Container is the CRI security context of container c in pod, given the
// user its image runs as and the pod's namespace options.
func Container(pod *corev1.Pod, c *corev1.Container, user ImageUser, ns *runtimeapi.NamespaceOption, opts Options) (*runtimeapi.LinuxContainerSecurityContext, error) {
	eff := Effective(pod, c)
	out := &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: ns}
	if caps := eff.Capabilities; caps != nil {
		out.Capabilities = &runtimeapi.Capability{}
		for _, a := range caps.Add {
			out.Capabilities.AddCapabilities = append(out.Capabilities.AddCapabilities, string(a))
		}
		for _, d := range caps.Drop {
			out.Capabilities.DropCapabilities = append(out.Capabilities.DropCapabilities, string(d))
		}
	}
	if o := eff.SELinuxOptions; o != nil {
		out.SelinuxOptions = &runtimeapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
	}
	if eff.RunAsUser != nil {
		out.RunAsUser = &runtimeapi.Int64Value{Value: *eff.RunAsUser}
	} else {
		// The image's own user, so that a runAsGroup has a user to go with.
		if user.UID != nil {
			out.RunAsUser = &runtimeapi.Int64Value{Value: *user.UID}
		}
		out.RunAsUsername = user.Username
	}
	if eff.RunAsGroup != nil {
		out.RunAsGroup = &runtimeapi.Int64Value{Value: *eff.RunAsGroup}
	}
	if eff.Privileged != nil {
		out.Privileged = *eff.Privileged
	}
	if eff.ReadOnlyRootFilesystem != nil {
		out.ReadonlyRootfs = *eff.ReadOnlyRootFilesystem
	}
	// Only an explicit false asks for no_new_privs.
	out.NoNewPrivs = eff.AllowPrivilegeEscalation != nil && !*eff.AllowPrivilegeEscalation
	out.SupplementalGroups = supplementalGroups(pod)
	policy, err := groupsPolicy(pod)
	if err != nil {
		return nil, err
	}
	out.SupplementalGroupsPolicy = policy
	if out.Seccomp, err = Seccomp(pod, c, opts); err != nil {
		return nil, err
	}
	if p := eff.AppArmorProfile; p != nil {
		switch p.Type {
		case corev1.AppArmorProfileTypeUnconfined:
			out.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
		case corev1.AppArmorProfileTypeRuntimeDefault:
			out.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
		case corev1.AppArmorProfileTypeLocalhost:
			if p.LocalhostProfile == nil {
				return nil, errors.New("appArmorProfile: localhostProfile must be set if type is Localhost")
			}
			out.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: *p.LocalhostProfile}
		}
	}
	return out, nil
}

// HasPrivileged says whether any container of the pod is privileged; the
// sandbox is then privileged too, as the kubelet asks.
func HasPrivileged(pod *corev1.Pod) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if sc := list[i].SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
				return true
			}
		}
	}
	return false
}

// Sandbox fills the sandbox's security context and returns the pod's
// sysctls: the pod's user, group and supplemental groups (fsGroup first),
// privileged when any container is, and RuntimeDefault seccomp, which the
// kubelet forces on sandboxes so that pods can tighten their own profiles.
// An unknown supplementalGroupsPolicy is left at Merge here; Container
// reports it, so the pod's containers fail with the error.
func Sandbox(pod *corev1.Pod, ns *runtimeapi.NamespaceOption) (*runtimeapi.LinuxSandboxSecurityContext, map[string]string) {
	sc := &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: ns,
		Privileged:       HasPrivileged(pod),
		Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
	}
	sysctls := map[string]string{}
	psc := pod.Spec.SecurityContext
	if psc == nil {
		return sc, sysctls
	}
	for _, s := range psc.Sysctls {
		sysctls[s.Name] = s.Value
	}
	if psc.RunAsUser != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *psc.RunAsUser}
	}
	if psc.RunAsGroup != nil {
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: *psc.RunAsGroup}
	}
	sc.SupplementalGroups = supplementalGroups(pod)
	if policy, err := groupsPolicy(pod); err == nil {
		sc.SupplementalGroupsPolicy = policy
	}
	if o := psc.SELinuxOptions; o != nil {
		sc.SelinuxOptions = &runtimeapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
	}
	return sc, sysctls
}

// VerifyNonRoot refuses, with the kubelet's messages, a container whose
// runAsNonRoot cannot be honoured: an explicit runAsUser 0, or no runAsUser
// and an image that runs as root, as an invalid UID or as a user name only.
func VerifyNonRoot(pod *corev1.Pod, c *corev1.Container, user ImageUser) error {
	eff := Effective(pod, c)
	if eff.RunAsNonRoot == nil || !*eff.RunAsNonRoot {
		return nil
	}
	podName := fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
	if eff.RunAsUser != nil {
		if *eff.RunAsUser == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", podName, c.Name)
		}
		return nil
	}
	switch {
	case user.UID == nil && user.Username != "":
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", user.Username, podName, c.Name)
	case user.UID != nil && *user.UID == 0:
		return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", podName, c.Name)
	case user.UID != nil:
		if errs := validation.IsValidUserID(*user.UID); len(errs) > 0 {
			return fmt.Errorf("container has runAsNonRoot and image has an invalid user id (%d). (Must be 1-(%d)): %s (pod: %q, container: %s)",
				*user.UID, math.MaxInt32, strings.Join(errs, "; "), podName, c.Name)
		}
	}
	return nil
}
