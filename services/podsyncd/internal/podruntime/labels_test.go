package podruntime

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestHashContainer checks the kubelet's hash: the values are what
// pkg/kubelet/container's HashContainer gives for these containers (FNV-32a
// of the hash dump of {"image","name"} JSON), and only the name and the image
// count.
func TestHashContainer(t *testing.T) {
	c := &corev1.Container{Name: "main", Image: "busybox:1.36"}
	if got := HashContainer(c); got != "42f056bf" {
		t.Errorf("hash of main/busybox:1.36 = %s, want 42f056bf", got)
	}
	c1 := &corev1.Container{Name: "c1", Image: "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"}
	if got := HashContainer(c1); got != "d5267408" {
		t.Errorf("hash of c1 = %s, want d5267408", got)
	}
	changed := c.DeepCopy()
	changed.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}
	changed.ResizePolicy = []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.RestartContainer}}
	changed.Env = []corev1.EnvVar{{Name: "A", Value: "b"}}
	changed.Command = []string{"sleep", "1"}
	if HashContainer(changed) != HashContainer(c) {
		t.Error("resources, resizePolicy, env or command changed the hash")
	}
	changed.Image = "busybox:1.37"
	if HashContainer(changed) == HashContainer(c) {
		t.Error("a new image kept the hash")
	}
}
