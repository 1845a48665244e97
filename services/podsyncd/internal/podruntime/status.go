package podruntime

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerState is a container's state in the runtime.
type ContainerState string

// Runtime container states.
const (
	StateCreated ContainerState = "created"
	StateRunning ContainerState = "running"
	StateExited  ContainerState = "exited"
	StateUnknown ContainerState = "unknown"
)

// ContainerStatus is what the runtime says about one container instance.
type ContainerStatus struct {
	ID         string
	Name       string
	State      ContainerState
	Attempt    int
	Hash       string
	Image      string
	ImageRef   string
	CreatedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
	ExitCode   int32
	Reason     string
	Message    string
	Init       bool
	// Resources are the CPU and memory settings the runtime reports for the
	// container (nil when it reports none).
	Resources *ContainerResources
	// User is the identity the runtime gave the container's first process
	// (nil when it reports none).
	User *corev1.ContainerUser
}

// SandboxStatus is what the runtime says about one pod sandbox.
type SandboxStatus struct {
	ID        string
	Ready     bool
	Attempt   uint32
	CreatedAt time.Time
	IP        string
	IPs       []string
	HostNet   bool
}

// PodStatus is a pod's whole runtime state.
type PodStatus struct {
	UID       types.UID
	Name      string
	Namespace string
	// Sandboxes newest first.
	Sandboxes []SandboxStatus
	// Containers newest first.
	Containers []ContainerStatus
}

// Latest returns the newest instance of the named container, if any.
func (s *PodStatus) Latest(name string) *ContainerStatus {
	for i := range s.Containers {
		if s.Containers[i].Name == name {
			return &s.Containers[i]
		}
	}
	return nil
}

// Previous returns the instance before the newest one, if any.
func (s *PodStatus) Previous(name string) *ContainerStatus {
	seen := false
	for i := range s.Containers {
		if s.Containers[i].Name != name {
			continue
		}
		if seen {
			return &s.Containers[i]
		}
		seen = true
	}
	return nil
}

// Running lists the running containers.
func (s *PodStatus) Running() []ContainerStatus {
	var out []ContainerStatus
	for _, c := range s.Containers {
		if c.State == StateRunning || c.State == StateCreated || c.State == StateUnknown {
			out = append(out, c)
		}
	}
	return out
}

// ReadySandbox returns the newest sandbox if it is ready.
func (s *PodStatus) ReadySandbox() *SandboxStatus {
	if len(s.Sandboxes) > 0 && s.Sandboxes[0].Ready {
		return &s.Sandboxes[0]
	}
	return nil
}

// GetPodStatus reads the runtime state of the pod with uid.
func (m *Manager) GetPodStatus(ctx context.Context, uid types.UID) (*PodStatus, error) {
	filter := map[string]string{LabelPodUID: string(uid)}
	sandboxes, err := m.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: filter})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes of pod %s: %w", uid, err)
	}
	st := &PodStatus{UID: uid}
	for _, sb := range sandboxes {
		s := SandboxStatus{ID: sb.Id, Ready: sb.State == runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: time.Unix(0, sb.CreatedAt)}
		if sb.Metadata != nil {
			s.Attempt = sb.Metadata.Attempt
			st.Name, st.Namespace = sb.Metadata.Name, sb.Metadata.Namespace
		}
		if s.Ready {
			resp, err := m.rt.PodSandboxStatus(ctx, sb.Id, false)
			if err == nil && resp.Status != nil {
				if n := resp.Status.Network; n != nil {
					s.IP = n.Ip
					s.IPs = append(s.IPs, n.Ip)
					for _, ip := range n.AdditionalIps {
						s.IPs = append(s.IPs, ip.Ip)
					}
				}
				if l := resp.Status.Linux; l != nil && l.Namespaces != nil && l.Namespaces.Options != nil {
					s.HostNet = l.Namespaces.Options.Network == runtimeapi.NamespaceMode_NODE
				}
			}
		}
		st.Sandboxes = append(st.Sandboxes, s)
	}
	sort.Slice(st.Sandboxes, func(i, j int) bool { return st.Sandboxes[i].CreatedAt.After(st.Sandboxes[j].CreatedAt) })

	containers, err := m.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: filter})
	if err != nil {
		return nil, fmt.Errorf("list containers of pod %s: %w", uid, err)
	}
	for _, c := range containers {
		resp, err := m.rt.ContainerStatus(ctx, c.Id, false)
		if err != nil || resp.Status == nil {
			continue // removed between list and status
		}
		s := resp.Status
		cs := ContainerStatus{
			ID:        s.Id,
			Name:      c.Labels[LabelContainerName],
			State:     convertState(s.State),
			Hash:      s.Annotations[AnnotationHash],
			ImageRef:  s.ImageRef,
			CreatedAt: time.Unix(0, s.CreatedAt),
			ExitCode:  s.ExitCode,
			Reason:    s.Reason,
			Message:   s.Message,
			Init:      c.Labels[LabelContainerType] == containerTypeInit,
			User:      containerUser(s.User),
		}
		if s.Image != nil {
			cs.Image = s.Image.Image
		}
		if s.StartedAt > 0 {
			cs.StartedAt = time.Unix(0, s.StartedAt)
		}
		if s.FinishedAt > 0 {
			cs.FinishedAt = time.Unix(0, s.FinishedAt)
		}
		if s.Metadata != nil {
			cs.Attempt = int(s.Metadata.Attempt)
		}
		cs.Resources = m.withActuated(uid, cs.Name, containerResources(s.Resources))
		if s.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			// The kubelet appends the container's own termination message
			// to the runtime's.
			if tm := terminationMessage(ctx, s); tm != "" {
				if cs.Message != "" {
					cs.Message += ": "
				}
				cs.Message += tm
			}
		}
		if n, err := strconv.Atoi(s.Annotations[AnnotationRestarts]); err == nil && n > cs.Attempt {
			cs.Attempt = n
		}
		st.Containers = append(st.Containers, cs)
	}
	sort.SliceStable(st.Containers, func(i, j int) bool {
		if st.Containers[i].Attempt != st.Containers[j].Attempt {
			return st.Containers[i].Attempt > st.Containers[j].Attempt
		}
		return st.Containers[i].CreatedAt.After(st.Containers[j].CreatedAt)
	})
	return st, nil
}

func convertState(s runtimeapi.ContainerState) ContainerState {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return StateCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return StateRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return StateExited
	default:
		return StateUnknown
	}
}

// containerUser converts the CRI's container user into the API's, as the
// kubelet's status conversion does; nil without a Linux user.
func containerUser(u *runtimeapi.ContainerUser) *corev1.ContainerUser {
	l := u.GetLinux()
	if l == nil {
		return nil
	}
	return &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{
		UID: l.GetUid(), GID: l.GetGid(), SupplementalGroups: slices.Clone(l.GetSupplementalGroups()),
	}}
}
