package runtimepods

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"
)

// Container is one running container of a pod.
type Container struct {
	// ID is the runtime's container ID, without a "<runtime>://" prefix.
	ID string
	// Name is the container's name in the pod spec.
	Name string
	// Image is the image the runtime reports.
	Image string
	// CreatedAt is the runtime's creation time in nanoseconds.
	CreatedAt int64
}

// Pod is one pod as the runtime sees it.
type Pod struct {
	UID       types.UID
	Name      string
	Namespace string
	// SandboxIDs are the pod's ready sandboxes, newest first.
	SandboxIDs []string
	// Containers are the running containers, newest first.
	Containers []Container
	// CreatedAt is the creation time of the newest sandbox, in nanoseconds.
	CreatedAt int64
}

// Container returns the newest running container named name, or nil.
func (p *Pod) Container(name string) *Container {
	if p == nil {
		return nil
	}
	for i := range p.Containers {
		if p.Containers[i].Name == name {
			return &p.Containers[i]
		}
	}
	return nil
}

// Pods is a list of pods, newest first.
type Pods []*Pod

// Find returns the newest pod with this namespace and name, and with this
// UID unless uid is empty; nil when there is none. Two pods can share a
// name while the older one is still being torn down; the newest wins, as
// in the kubelet.
func (ps Pods) Find(namespace, name string, uid types.UID) *Pod {
	for _, p := range ps {
		if p.Namespace == namespace && p.Name == name && (uid == "" || p.UID == uid) {
			return p
		}
	}
	return nil
}

// List asks the runtime for ready sandboxes and running containers and
// groups them by pod UID.
func List(ctx context.Context, rt criapi.RuntimeService) (Pods, error) {
	sandboxes, err := rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	})
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes: %w", err)
	}
	byUID := map[types.UID]*Pod{}
	sort.Slice(sandboxes, func(i, j int) bool { return sandboxes[i].GetCreatedAt() > sandboxes[j].GetCreatedAt() })
	for _, s := range sandboxes {
		md := s.GetMetadata()
		if md == nil {
			continue
		}
		uid := types.UID(md.GetUid())
		p := byUID[uid]
		if p == nil {
			p = &Pod{UID: uid, Name: md.GetName(), Namespace: md.GetNamespace(), CreatedAt: s.GetCreatedAt()}
			byUID[uid] = p
		}
		p.SandboxIDs = append(p.SandboxIDs, s.GetId())
	}
	containers, err := rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	sort.Slice(containers, func(i, j int) bool { return containers[i].GetCreatedAt() > containers[j].GetCreatedAt() })
	for _, c := range containers {
		labels := c.GetLabels()
		uid := types.UID(labels[kubelettypes.KubernetesPodUIDLabel])
		p := byUID[uid]
		if p == nil {
			// A running container whose sandbox is not ready (or not
			// labelled) still belongs to a pod the kubelet would list.
			if uid == "" {
				continue
			}
			p = &Pod{UID: uid, Name: labels[kubelettypes.KubernetesPodNameLabel], Namespace: labels[kubelettypes.KubernetesPodNamespaceLabel]}
			byUID[uid] = p
		}
		name := c.GetMetadata().GetName()
		if name == "" {
			name = labels[kubelettypes.KubernetesContainerNameLabel]
		}
		p.Containers = append(p.Containers, Container{ID: c.GetId(), Name: name, Image: c.GetImage().GetImage(), CreatedAt: c.GetCreatedAt()})
	}
	out := make(Pods, 0, len(byUID))
	for _, p := range byUID {
		out = append(out, p)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].CreatedAt != out[j].CreatedAt {
			return out[i].CreatedAt > out[j].CreatedAt
		}
		return out[i].UID < out[j].UID
	})
	return out, nil
}

// APIPods turns the runtime's pods into the minimal API objects the kubelet's
// /runningpods/ returns: name, namespace, UID and the running containers'
// names and images.
func (ps Pods) APIPods() []corev1.Pod {
	out := make([]corev1.Pod, 0, len(ps))
	for _, p := range ps {
		ap := corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: p.UID, Name: p.Name, Namespace: p.Namespace}}
		for _, c := range p.Containers {
			ap.Spec.Containers = append(ap.Spec.Containers, corev1.Container{Name: c.Name, Image: c.Image})
		}
		out = append(out, ap)
	}
	return out
}
