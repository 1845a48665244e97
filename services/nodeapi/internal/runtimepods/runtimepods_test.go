package runtimepods

import (
	"context"
	"testing"

	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeRuntime answers the two list calls; anything else would panic.
type fakeRuntime struct {
	criapi.RuntimeService
	sandboxes  []*runtimeapi.PodSandbox
	containers []*runtimeapi.Container
	filters    []string
}

func (f *fakeRuntime) ListPodSandbox(_ context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	f.filters = append(f.filters, "sandbox:"+filter.GetState().GetState().String())
	return f.sandboxes, nil
}

func (f *fakeRuntime) ListContainers(_ context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	f.filters = append(f.filters, "container:"+filter.GetState().GetState().String())
	return f.containers, nil
}

func sandbox(id, uid, name string, created int64) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{Id: id, CreatedAt: created,
		Metadata: &runtimeapi.PodSandboxMetadata{Uid: uid, Name: name, Namespace: "ns"}}
}

func container(id, uid, name string, created int64) *runtimeapi.Container {
	return &runtimeapi.Container{Id: id, CreatedAt: created, Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:  &runtimeapi.ImageSpec{Image: "img-" + name},
		Labels: map[string]string{"io.kubernetes.pod.uid": uid, "io.kubernetes.pod.name": "orphan", "io.kubernetes.pod.namespace": "ns"}}
}

// TestList: grouping by UID, newest pod and container first, a name shared
// by a terminating and a new pod resolved to the new one, only ready
// sandboxes and running containers asked for.
func TestList(t *testing.T) {
	rt := &fakeRuntime{
		sandboxes: []*runtimeapi.PodSandbox{
			sandbox("s-old", "uid-old", "web", 10),
			sandbox("s-new", "uid-new", "web", 20),
			sandbox("s-db", "uid-db", "db", 15),
			{Id: "no-metadata"},
		},
		containers: []*runtimeapi.Container{
			container("c1", "uid-new", "app", 21),
			container("c2", "uid-new", "app", 25), // a newer attempt of the same container
			container("c3", "uid-new", "sidecar", 22),
			container("c4", "uid-old", "app", 11),
			container("c5", "uid-lost", "x", 30), // sandbox not ready
			{Id: "unlabelled"},
		},
	}
	all, err := List(context.Background(), rt)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.filters; len(got) != 2 || got[0] != "sandbox:SANDBOX_READY" || got[1] != "container:CONTAINER_RUNNING" {
		t.Errorf("filters %v", got)
	}
	if len(all) != 4 {
		t.Fatalf("%d pods, want 4: %+v", len(all), all)
	}
	web := all.Find("ns", "web", "")
	if web == nil || web.UID != "uid-new" {
		t.Fatalf("web resolves to %+v, want the newest pod", web)
	}
	if c := web.Container("app"); c == nil || c.ID != "c2" || c.Image != "img-app" {
		t.Errorf("app resolves to %+v, want the newest attempt c2", c)
	}
	if c := all.Find("ns", "web", "uid-old").Container("app"); c == nil || c.ID != "c4" {
		t.Errorf("the old web's app: %+v", c)
	}
	if all.Find("ns", "web", "uid-none") != nil || all.Find("other", "web", "") != nil {
		t.Error("found a pod that does not exist")
	}
	if all.Find("ns", "db", "").Container("app") != nil {
		t.Error("a pod without containers returned one")
	}
	var nilPod *Pod
	if nilPod.Container("x") != nil {
		t.Error("nil pod returned a container")
	}
	if lost := all.Find("ns", "orphan", "uid-lost"); lost == nil || len(lost.SandboxIDs) != 0 || lost.Container("x") == nil {
		t.Errorf("a running container without a ready sandbox: %+v", lost)
	}
	api := all.APIPods()
	if len(api) != 4 || api[0].UID != "uid-new" || api[3].UID != "uid-lost" || len(api[0].Spec.Containers) != 3 {
		t.Errorf("APIPods: %d pods, first %s, last %s", len(api), api[0].UID, api[len(api)-1].UID)
	}
}
