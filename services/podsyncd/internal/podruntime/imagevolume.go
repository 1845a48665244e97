package podruntime

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// imageVolumes pulls the image of each image volume (volumes[].image) that
// container c mounts, with the volume's pullPolicy and the pod's
// credentials, through the same path (events, back-off) as container
// images; the pull's events go to the pod, as the kubelet records them, and
// a failure is c's waiting reason (ErrImagePull, ImagePullBackOff,
// ErrImageNeverPull). The result maps the volume's name to the image to
// mount.
func (m *Manager) imageVolumes(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (map[string]*runtimeapi.ImageSpec, error) {
	var out map[string]*runtimeapi.ImageSpec
	for _, vm := range c.VolumeMounts {
		v := podVolume(pod, vm.Name)
		if v == nil || v.Image == nil {
			continue
		}
		if _, done := out[vm.Name]; done {
			continue
		}
		ref, err := m.ensure(ctx, pod, c, pod, v.Image.Reference, v.Image.PullPolicy)
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = map[string]*runtimeapi.ImageSpec{}
		}
		out[vm.Name] = &runtimeapi.ImageSpec{Image: ref, UserSpecifiedImage: v.Image.Reference, Annotations: pod.Annotations}
	}
	return out, nil
}

// podVolume is the pod's volume called name, nil if there is none.
func podVolume(pod *corev1.Pod, name string) *corev1.Volume {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == name {
			return &pod.Spec.Volumes[i]
		}
	}
	return nil
}
