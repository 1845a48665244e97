package podruntime

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/services/podsyncd/internal/resources"

	"github.com/microlet/microlet/internal/podutil"
)

// ActuatedState remembers the resources the runtime was last given for each
// container (at creation or by an in-place update), across restarts.
type ActuatedState interface {
	Actuated(uid types.UID, name string) (corev1.ResourceRequirements, bool)
	SetActuated(uid types.UID, name string, r corev1.ResourceRequirements) error
}

// resourceValues are the four resizable values of a container: memory in
// bytes, CPU in millicores (kuberuntime's resourceRequirements).
type resourceValues struct {
	memoryLimit, memoryRequest, cpuLimit, cpuRequest int64
}

func valuesOf(r *corev1.ResourceRequirements) resourceValues {
	return resourceValues{
		memoryLimit: r.Limits.Memory().Value(), memoryRequest: r.Requests.Memory().Value(),
		cpuLimit: r.Limits.Cpu().MilliValue(), cpuRequest: r.Requests.Cpu().MilliValue(),
	}
}

// PodCgroupResizer keeps a pod's cgroup at least as large as its containers
// while they are resized (podcgroups.Manager).
type PodCgroupResizer interface {
	// ResizePod sets the pod cgroup to the larger of from's and to's
	// limits (grow), or to to's.
	ResizePod(from, to *corev1.Pod, grow bool) error
}

// ContainerUpdate is one in-place update of a running container for one
// resource (the kubelet's containerToUpdateInfo).
type ContainerUpdate struct {
	// Name and ID are the container's name and runtime ID.
	Name, ID string
	// Init marks a sidecar (restartable init container).
	Init    bool
	desired resourceValues
	// current is shared by a container's memory and CPU updates, so the
	// second one builds on what the first applied.
	current *resourceValues
}

// computeResize is the kubelet's computePodResizeAction for a running
// container whose spec (hash) is unchanged: nothing when its actuated
// resources equal the allocated ones (pod carries the allocation); else a
// restart when the resizePolicy of a changed resource is RestartContainer
// (the kill is added here, the caller starts it again), or in-place updates,
// decreases ordered before increases. It returns false for a restart.
func (m *Manager) computeResize(pod *corev1.Pod, c *corev1.Container, init bool, cs *ContainerStatus, a *Actions) bool {
	if m.opts.Actuated == nil || cs.State != StateRunning {
		return true
	}
	act, found := m.opts.Actuated.Actuated(pod.UID, c.Name)
	if !found {
		m.log.Warn("no actuated resources recorded; resizing from zero", "pod", podRef(pod), "container", c.Name)
	}
	desired, current := valuesOf(&c.Resources), valuesOf(&act)
	if desired == current {
		return true
	}
	policy := func(r corev1.ResourceName) corev1.ResourceResizeRestartPolicy {
		for _, p := range c.ResizePolicy {
			if p.ResourceName == r {
				return p.RestartPolicy
			}
		}
		return corev1.NotRequired
	}
	restart := (desired.memoryLimit != current.memoryLimit || desired.memoryRequest != current.memoryRequest) && policy(corev1.ResourceMemory) == corev1.RestartContainer ||
		(desired.cpuLimit != current.cpuLimit || desired.cpuRequest != current.cpuRequest) && policy(corev1.ResourceCPU) == corev1.RestartContainer
	if restart {
		a.Kill[cs.ID] = fmt.Sprintf("Container %s resize requires restart", c.Name)
		a.UpdatePodResources = true
		return false
	}
	if a.Resize == nil {
		a.Resize = map[corev1.ResourceName][]ContainerUpdate{}
	}
	cur := current
	mark := func(r corev1.ResourceName, want, have int64) {
		u := ContainerUpdate{Name: c.Name, ID: cs.ID, Init: init, desired: desired, current: &cur}
		switch {
		case want > have:
			a.Resize[r] = append(a.Resize[r], u)
		case want < have:
			a.Resize[r] = append([]ContainerUpdate{u}, a.Resize[r]...)
		}
	}
	if desired.memoryLimit != current.memoryLimit {
		mark(corev1.ResourceMemory, desired.memoryLimit, current.memoryLimit)
	} else if desired.memoryRequest != current.memoryRequest {
		mark(corev1.ResourceMemory, desired.memoryRequest, current.memoryRequest)
	}
	if desired.cpuLimit != current.cpuLimit {
		mark(corev1.ResourceCPU, desired.cpuLimit, current.cpuLimit)
	} else if desired.cpuRequest != current.cpuRequest {
		mark(corev1.ResourceCPU, desired.cpuRequest, current.cpuRequest)
	}
	return true
}

// requirements turns values back into the lists the kubelet sends.
func (v resourceValues) requirements() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(v.cpuLimit, resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(v.memoryLimit, resource.BinarySI),
		},
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(v.cpuRequest, resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(v.memoryRequest, resource.BinarySI),
		},
	}
}

// ResizeError is the error of an in-place resize that failed (reported in
// PodResizeInProgress with reason Error).
type ResizeError struct{ Message string }

func (e *ResizeError) Error() string { return e.Message }

// doResize applies the in-place updates: memory first, then CPU, each list
// in its order (decreases first); a failure stops there, the next sync
// retries the rest (the kubelet's doPodResizeAction without pod cgroups).
// Each update carries the new values of its resource and the current ones
// of the other; what the runtime accepted is recorded as actuated.
func (m *Manager) doResize(ctx context.Context, pod *corev1.Pod, a *Actions) *ResizeError {
	if err := m.validateMemoryDecrease(ctx, a); err != nil {
		return &ResizeError{Message: err.Error()}
	}
	// The pod cgroup first grows to hold both the old and the new sizes,
	// and takes the new ones once every container has them (the kubelet's
	// order of pod and container cgroup updates).
	current := m.actuatedPod(pod)
	if m.opts.PodCgroup != nil {
		if err := m.opts.PodCgroup.ResizePod(current, pod, true); err != nil {
			return &ResizeError{Message: err.Error()}
		}
	}
	if err := m.updateContainers(ctx, pod, a); err != nil {
		return err
	}
	if m.opts.PodCgroup != nil {
		if err := m.opts.PodCgroup.ResizePod(current, pod, false); err != nil {
			return &ResizeError{Message: err.Error()}
		}
	}
	return nil
}

// actuatedPod is pod with its containers' actuated resources.
func (m *Manager) actuatedPod(pod *corev1.Pod) *corev1.Pod {
	out := pod.DeepCopy()
	for _, list := range [][]corev1.Container{out.Spec.InitContainers, out.Spec.Containers} {
		for i := range list {
			if r, ok := m.opts.Actuated.Actuated(pod.UID, list[i].Name); ok {
				list[i].Resources = r
			}
		}
	}
	return out
}

// updateContainers calls UpdateContainerResources for every update.
func (m *Manager) updateContainers(ctx context.Context, pod *corev1.Pod, a *Actions) *ResizeError {
	for _, rn := range []corev1.ResourceName{corev1.ResourceMemory, corev1.ResourceCPU} {
		for _, u := range a.Resize[rn] {
			next := *u.current
			if rn == corev1.ResourceMemory {
				next.memoryLimit, next.memoryRequest = u.desired.memoryLimit, u.desired.memoryRequest
			} else {
				next.cpuLimit, next.cpuRequest = u.desired.cpuLimit, u.desired.cpuRequest
			}
			c := podutil.FindContainer(pod, u.Name, true)
			if c == nil {
				continue
			}
			cc := c.DeepCopy()
			cc.Resources = next.requirements()
			lr := resources.Container(pod, cc, m.opts.MemoryCapacity)
			if err := m.rt.UpdateContainerResources(ctx, u.ID, &runtimeapi.ContainerResources{Linux: lr}); err != nil {
				m.log.Warn("in-place resize failed", "pod", podRef(pod), "container", u.Name, "resource", rn, "err", err)
				return &ResizeError{Message: fmt.Sprintf("failed to update resources of container %s: %s", u.Name, grpcMessage(err))}
			}
			*u.current = next
			if err := m.opts.Actuated.SetActuated(pod.UID, u.Name, cc.Resources); err != nil {
				return &ResizeError{Message: fmt.Sprintf("failed to record resources of container %s: %v", u.Name, err)}
			}
			m.log.Info("resized container in place", "pod", podRef(pod), "container", u.Name, "resource", rn)
		}
	}
	return nil
}

// recordActuated notes a new container's resources as actuated.
func (m *Manager) recordActuated(pod *corev1.Pod, c *corev1.Container, kind containerKind) {
	if m.opts.Actuated == nil || kind == kindEphemeral {
		return
	}
	if err := m.opts.Actuated.SetActuated(pod.UID, c.Name, *c.Resources.DeepCopy()); err != nil {
		m.log.Warn("could not record actuated resources", "pod", podRef(pod), "container", c.Name, "err", err)
	}
}

// validateMemoryDecrease is the kubelet's best-effort check before a resize:
// a memory limit that is added or lowered must stay above the container's
// current memory usage (CRI ContainerStats), else nothing is updated, so the
// pod is not left half resized.
func (m *Manager) validateMemoryDecrease(ctx context.Context, a *Actions) error {
	var errs []error
	for _, u := range a.Resize[corev1.ResourceMemory] {
		want, have := u.desired.memoryLimit, u.current.memoryLimit
		if want == 0 || (have != 0 && want >= have) {
			continue
		}
		stats, err := m.rt.ContainerStats(ctx, u.ID)
		usage := stats.GetMemory().GetUsageBytes()
		switch {
		case err != nil || usage == nil:
			errs = append(errs, fmt.Errorf("missing container %q memory usage", u.Name))
		case usage.Value >= uint64(want):
			errs = append(errs, fmt.Errorf("attempting to set container %q memory limit (%d) below current usage (%d)", u.Name, want, usage.Value))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cannot decrease memory limits: %w", utilerrors.NewAggregate(errs))
	}
	return nil
}
