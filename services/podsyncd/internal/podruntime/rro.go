package podruntime

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// ResolveRecursiveReadOnly decides whether a volumeMount is recursively
// read-only on a runtime handler that does (supported) or does not make
// such mounts, as the kubelet's resolveRecursiveReadOnly: unset or
// Disabled is not; IfPossible is when the handler can; Enabled must be,
// and is an error where the handler cannot. Either of the latter needs the
// mount read-only with no propagation.
func ResolveRecursiveReadOnly(vm *corev1.VolumeMount, supported bool) (bool, error) {
	if vm.RecursiveReadOnly == nil || *vm.RecursiveReadOnly == corev1.RecursiveReadOnlyDisabled {
		return false, nil
	}
	if !vm.ReadOnly {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not read-only", vm.Name)
	}
	if p := vm.MountPropagation; p != nil && *p != corev1.MountPropagationNone {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not compatible with propagation %q", vm.Name, *p)
	}
	switch mode := *vm.RecursiveReadOnly; mode {
	case corev1.RecursiveReadOnlyIfPossible:
		return supported, nil
	case corev1.RecursiveReadOnlyEnabled:
		if !supported {
			return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not supported by the runtime", vm.Name)
		}
		return true, nil
	default:
		return false, fmt.Errorf("unknown recursive read-only mode %q", mode)
	}
}

// SupportsRecursiveReadOnlyMounts says whether the runtime handler of pod
// makes recursive read-only mounts (Options.RecursiveReadOnly). A pod whose
// RuntimeClass cannot be resolved counts as without, as in the kubelet.
func (m *Manager) SupportsRecursiveReadOnlyMounts(pod *corev1.Pod) bool {
	if m.opts.RecursiveReadOnly == nil {
		return false
	}
	handler, err := m.runtimeHandler(pod)
	return err == nil && m.opts.RecursiveReadOnly(handler)
}

// runtimeHandler is the CRI runtime handler pod's sandbox runs with
// (Options.RuntimeHandler); "" is the runtime's default.
func (m *Manager) runtimeHandler(pod *corev1.Pod) (string, error) {
	if m.opts.RuntimeHandler == nil {
		return "", nil
	}
	return m.opts.RuntimeHandler(pod)
}
