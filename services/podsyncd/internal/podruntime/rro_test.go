package podruntime

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestResolveRecursiveReadOnly(t *testing.T) {
	mode := func(m corev1.RecursiveReadOnlyMode) *corev1.RecursiveReadOnlyMode { return &m }
	for _, tc := range []struct {
		name      string
		vm        corev1.VolumeMount
		supported bool
		want      bool
		err       string
	}{
		{name: "unset", vm: corev1.VolumeMount{ReadOnly: true}, supported: true},
		{name: "unset, read-write", vm: corev1.VolumeMount{}, supported: true},
		{name: "disabled", vm: corev1.VolumeMount{ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyDisabled)}, supported: true},
		{name: "disabled needs nothing", vm: corev1.VolumeMount{RecursiveReadOnly: mode(corev1.RecursiveReadOnlyDisabled),
			MountPropagation: ptr.To(corev1.MountPropagationBidirectional)}},
		{name: "if possible, supported", vm: corev1.VolumeMount{ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyIfPossible)}, supported: true, want: true},
		{name: "if possible, unsupported", vm: corev1.VolumeMount{ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyIfPossible)}},
		{name: "enabled, supported", vm: corev1.VolumeMount{ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyEnabled),
			MountPropagation: ptr.To(corev1.MountPropagationNone)}, supported: true, want: true},
		{name: "enabled, unsupported", vm: corev1.VolumeMount{Name: "mnt", ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyEnabled)},
			err: `volume "mnt" requested recursive read-only mode, but it is not supported by the runtime`},
		{name: "enabled, read-write", vm: corev1.VolumeMount{Name: "mnt", RecursiveReadOnly: mode(corev1.RecursiveReadOnlyEnabled)}, supported: true,
			err: `volume "mnt" requested recursive read-only mode, but it is not read-only`},
		{name: "if possible, host to container", vm: corev1.VolumeMount{Name: "mnt", ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyIfPossible),
			MountPropagation: ptr.To(corev1.MountPropagationHostToContainer)}, supported: true,
			err: `volume "mnt" requested recursive read-only mode, but it is not compatible with propagation "HostToContainer"`},
		{name: "unknown mode", vm: corev1.VolumeMount{ReadOnly: true, RecursiveReadOnly: mode("Sometimes")}, supported: true,
			err: `unknown recursive read-only mode "Sometimes"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolveRecursiveReadOnly(&tc.vm, tc.supported)
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error = %v, want %q", err, tc.err)
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case got != tc.want:
				t.Errorf("recursive = %v, want %v", got, tc.want)
			}
		})
	}
}
