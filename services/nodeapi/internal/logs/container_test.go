package logs

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func running() corev1.ContainerState {
	return corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
}

func terminated(id string) corev1.ContainerState {
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ContainerID: id}}
}

func waiting(reason string) corev1.ContainerState {
	return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}
}

func TestSelectContainer(t *testing.T) {
	tests := []struct {
		name     string
		status   corev1.ContainerStatus
		list     string // "init" or "ephemeral"; regular otherwise
		previous bool
		want     string
		wantErr  string
	}{
		{name: "running", status: corev1.ContainerStatus{ContainerID: "docker://b", State: running(), LastTerminationState: terminated("docker://a")}, want: "docker://b"},
		{name: "previous of a restarted container", status: corev1.ContainerStatus{ContainerID: "docker://b", State: running(), LastTerminationState: terminated("docker://a")}, previous: true, want: "docker://a"},
		{name: "previous of a never restarted container", status: corev1.ContainerStatus{ContainerID: "docker://b", State: running()}, previous: true,
			wantErr: `previous terminated container "app" in pod "web" not found`},
		{name: "previous whose last state lost its ID", status: corev1.ContainerStatus{State: running(), LastTerminationState: terminated("")}, previous: true,
			wantErr: `previous terminated container "app" in pod "web" not found`},
		{name: "previous of a waiting container that ran before", status: corev1.ContainerStatus{State: waiting("CrashLoopBackOff"), LastTerminationState: terminated("docker://a")}, previous: true, want: "docker://a"},
		{name: "terminated", status: corev1.ContainerStatus{ContainerID: "docker://x", State: terminated("docker://b"), LastTerminationState: terminated("docker://a")}, want: "docker://b"},
		{name: "terminated without ID falls back to the last one", status: corev1.ContainerStatus{State: terminated(""), LastTerminationState: terminated("docker://a")}, want: "docker://a"},
		{name: "terminated without any ID", status: corev1.ContainerStatus{State: terminated("")},
			wantErr: `container "app" in pod "web" is terminated`},
		{name: "crash loop reads the last run", status: corev1.ContainerStatus{State: waiting("CrashLoopBackOff"), LastTerminationState: terminated("docker://a")}, want: "docker://a"},
		{name: "last state without ID", status: corev1.ContainerStatus{State: waiting("CrashLoopBackOff"), LastTerminationState: terminated("")},
			wantErr: `container "app" in pod "web" is terminated`},
		{name: "image pull error", status: corev1.ContainerStatus{State: waiting("ErrImagePull")},
			wantErr: `container "app" in pod "web" is waiting to start: image can't be pulled`},
		{name: "image pull back-off", status: corev1.ContainerStatus{State: waiting("ImagePullBackOff")},
			wantErr: `container "app" in pod "web" is waiting to start: trying and failing to pull image`},
		{name: "other waiting reason", status: corev1.ContainerStatus{State: waiting("ContainerCreating")},
			wantErr: `container "app" in pod "web" is waiting to start: ContainerCreating`},
		{name: "no state at all", status: corev1.ContainerStatus{},
			wantErr: `container "app" in pod "web" is waiting to start - no logs yet`},
		{name: "init container", list: "init", status: corev1.ContainerStatus{State: terminated("docker://i")}, want: "docker://i"},
		{name: "ephemeral container", list: "ephemeral", status: corev1.ContainerStatus{ContainerID: "docker://e", State: running()}, want: "docker://e"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.status.Name = "app"
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}}
			// A decoy with another name, so the lookup must match names.
			decoy := corev1.ContainerStatus{Name: "sidecar", ContainerID: "docker://decoy", State: running()}
			pod.Status.ContainerStatuses = []corev1.ContainerStatus{decoy}
			switch tt.list {
			case "init":
				pod.Status.InitContainerStatuses = []corev1.ContainerStatus{tt.status}
			case "ephemeral":
				pod.Status.EphemeralContainerStatuses = []corev1.ContainerStatus{tt.status}
			default:
				pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, tt.status)
			}
			got, err := selectContainer(pod, "app", tt.previous)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want %q (got ID %q)", err, tt.wantErr, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("container ID = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSelectContainerWithoutStatus(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}}
	_, err := selectContainer(pod, "app", false)
	if want := `container "app" in pod "web" is not available`; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

func TestSelectContainerPrefersRegularStatuses(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}}
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "app", ContainerID: "docker://init", State: running()}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", ContainerID: "docker://main", State: running()}}
	if got, err := selectContainer(pod, "app", false); err != nil || got != "docker://main" {
		t.Errorf("got %q, %v; want docker://main", got, err)
	}
}

func TestParseContainerID(t *testing.T) {
	tests := []struct {
		in     string
		want   containerID
		wantOK bool
	}{
		{in: "docker://abc", want: containerID{runtime: "docker", id: "abc"}, wantOK: true},
		{in: `"containerd://abc"`, want: containerID{runtime: "containerd", id: "abc"}, wantOK: true},
		{in: "abc", want: containerID{}},
		{in: "", want: containerID{}},
		{in: "a://b://c", want: containerID{}},
	}
	for _, tt := range tests {
		got, ok := parseContainerID(tt.in)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("parseContainerID(%q) = %+v, %v; want %+v, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
	if s := (containerID{runtime: "docker", id: "abc"}).String(); s != "docker://abc" {
		t.Errorf("String() = %q", s)
	}
}

func TestInSpec(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers:      []corev1.Container{{Name: "init"}},
		Containers:          []corev1.Container{{Name: "app"}},
		EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug"}}},
	}}
	for name, want := range map[string]bool{"init": true, "app": true, "debug": true, "other": false, "": false} {
		if got := inSpec(pod, name); got != want {
			t.Errorf("inSpec(%q) = %v, want %v", name, got, want)
		}
	}
}
