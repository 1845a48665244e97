package admission

import (
	"errors"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// AppArmorReason is the rejection reason of a pod asking for an AppArmor
// profile the node cannot enforce (the kubelet's AppArmorNotAdmittedReason).
const AppArmorReason = "AppArmor"

// AppArmorHost says whether the host can enforce AppArmor profiles: nil
// when it can, else why not.
type AppArmorHost interface {
	AppArmorSupport() error
}

// The files the kernel's AppArmor module shows when it is built in and
// switched on: its securityfs directory and its "enabled" parameter.
const (
	appArmorSecurityFS = "/sys/kernel/security/apparmor"
	appArmorEnabled    = "/sys/module/apparmor/parameters/enabled"
)

// KernelAppArmor is the real host: AppArmor can be enforced when the
// kernel has AppArmor's securityfs directory and its module parameter
// "enabled" reads Y, the check runc and the kubelet make.
type KernelAppArmor struct{}

// AppArmorSupport reads the kernel's AppArmor files.
func (KernelAppArmor) AppArmorSupport() error {
	return appArmorSupport(appArmorSecurityFS, appArmorEnabled)
}

func appArmorSupport(securityFS, enabledParam string) error {
	errOff := errors.New("AppArmor is not enabled on the host")
	if _, err := os.Stat(securityFS); err != nil {
		return errOff
	}
	b, err := os.ReadFile(enabledParam)
	if err != nil || !strings.HasPrefix(string(b), "Y") {
		return errOff
	}
	return nil
}

// AppArmor is the kubelet's AppArmor admission handler: a pending pod
// that asks for an AppArmor profile other than Unconfined (the pod's or a
// container's securityContext.appArmorProfile, or the deprecated
// container.apparmor.security.beta.kubernetes.io/<container> annotation)
// is refused when the host cannot enforce AppArmor, and so is one whose
// Localhost profile has no name. Whether a named Localhost profile is
// loaded is left to the runtime, which then fails to create the container.
type AppArmor struct {
	// hostErr is why the host cannot enforce AppArmor, asked once: the
	// kubelet too expects a restart to notice AppArmor switched on or off.
	hostErr error
}

// NewAppArmor asks host once whether it can enforce AppArmor.
func NewAppArmor(host AppArmorHost) *AppArmor {
	return &AppArmor{hostErr: host.AppArmorSupport()}
}

// Admit refuses a pod asking for AppArmor the node cannot give, with the
// kubelet's reason and message. Pods past Pending (already running when
// podsyncd started) are not checked again; a nil handler admits.
func (a *AppArmor) Admit(pod *corev1.Pod) Result {
	if a == nil || pod.Status.Phase != corev1.PodPending || !requiresAppArmor(pod) {
		return Result{Admit: true}
	}
	if err := a.check(pod); err != nil {
		return Result{Reason: AppArmorReason, Message: fmt.Sprintf("Cannot enforce AppArmor: %v", err)}
	}
	return Result{Admit: true}
}

func (a *AppArmor) check(pod *corev1.Pod) error {
	if a.hostErr != nil {
		return a.hostErr
	}
	for _, c := range allContainers(pod) {
		p := appArmorProfile(pod, c)
		if p != nil && p.Type == corev1.AppArmorProfileTypeLocalhost &&
			(p.LocalhostProfile == nil || strings.TrimSpace(*p.LocalhostProfile) == "") {
			return fmt.Errorf("container %q asks for a Localhost AppArmor profile with an empty name", c.Name)
		}
	}
	return nil
}

// requiresAppArmor says whether the pod asks for any AppArmor profile but
// Unconfined, in a field or in a deprecated annotation.
func requiresAppArmor(pod *corev1.Pod) bool {
	confines := func(p *corev1.AppArmorProfile) bool {
		return p != nil && p.Type != corev1.AppArmorProfileTypeUnconfined
	}
	if sc := pod.Spec.SecurityContext; sc != nil && confines(sc.AppArmorProfile) {
		return true
	}
	for _, c := range allContainers(pod) {
		if c.SecurityContext != nil && confines(c.SecurityContext.AppArmorProfile) {
			return true
		}
	}
	for k, v := range pod.Annotations {
		if strings.HasPrefix(k, corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) && v != corev1.DeprecatedAppArmorBetaProfileNameUnconfined {
			return true
		}
	}
	return false
}

// appArmorProfile is the AppArmor profile container c of pod asks for, as
// the kubelet picks it: the container's field, else the deprecated
// annotation for it (a static pod's annotations are not copied into the
// fields), else the pod's field; nil when none is set or the annotation
// is not a profile.
func appArmorProfile(pod *corev1.Pod, c *corev1.Container) *corev1.AppArmorProfile {
	if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil {
		return c.SecurityContext.AppArmorProfile
	}
	if v, ok := pod.Annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+c.Name]; ok {
		switch {
		case v == corev1.DeprecatedAppArmorBetaProfileRuntimeDefault:
			return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
		case v == corev1.DeprecatedAppArmorBetaProfileNameUnconfined:
			return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		case strings.HasPrefix(v, corev1.DeprecatedAppArmorBetaProfileNamePrefix):
			name := strings.TrimPrefix(v, corev1.DeprecatedAppArmorBetaProfileNamePrefix)
			return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}
		default:
			return nil
		}
	}
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.AppArmorProfile
	}
	return nil
}

// allContainers are the pod's init, app and ephemeral containers (an
// ephemeral container's common part seen as a Container, not copied).
func allContainers(pod *corev1.Pod) []*corev1.Container {
	var out []*corev1.Container
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			out = append(out, &list[i])
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		out = append(out, (*corev1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	return out
}
