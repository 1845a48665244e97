package sources

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/service/servicetest"
	"github.com/microlet/microlet/internal/testenv"
	cloudsyncv1 "github.com/microlet/microlet/proto/microlet/cloudsync/v1"
)

type fakeCRI struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer
	networkReady bool
}

func (f *fakeCRI) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "fake", RuntimeVersion: "1.2.3", RuntimeApiVersion: "v1"}, nil
}

func (f *fakeCRI) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: f.networkReady, Reason: "NoCNI", Message: "cni config uninitialized"},
	}}, RuntimeHandlers: []*runtimeapi.RuntimeHandler{
		{Name: "runc", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true, UserNamespaces: true}},
		{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true}},
		{Name: "old"}, // no features: none of them
	}}, nil
}

// ImageFsInfo answers k8s.io/cri-client's connection check of the image
// service.
func (f *fakeCRI) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

func (f *fakeCRI) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{
		{Id: "a", RepoTags: []string{"small:1"}, Size: 10},
		{Id: "b", RepoTags: []string{"big:1"}, RepoDigests: []string{"big@sha256:00"}, Size: 1000},
		{Id: "c", Size: 5}, // no names: not reported
	}}, nil
}

func serve(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	path := filepath.Join(testenv.ShortDir(t, "nsd"), "s.sock")
	servicetest.Serve(t, path, register)
	return "unix://" + path
}

func TestRuntimeReadsCRI(t *testing.T) {
	f := &fakeCRI{}
	ep := serve(t, func(s *grpc.Server) {
		runtimeapi.RegisterRuntimeServiceServer(s, f)
		runtimeapi.RegisterImageServiceServer(s, f)
	})
	r := NewRuntime(ep, "", 0)
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := r.Get(ctx)
	if st.Err != nil {
		t.Fatal(st.Err)
	}
	if st.ContainerRuntimeVersion() != "fake://1.2.3" || st.RuntimeReady != nil {
		t.Fatalf("state = %+v", st)
	}
	if st.NetworkReady == nil || !strings.Contains(st.NetworkReady.Error(), "NoCNI") {
		t.Fatalf("network condition = %v", st.NetworkReady)
	}
	if len(st.Images) != 2 || st.Images[0].Names[0] != "big:1" || st.Images[0].Names[1] != "big@sha256:00" {
		t.Fatalf("images = %+v", st.Images)
	}
	// The handlers sorted by name, each with both features set.
	var got []string
	for _, h := range st.Handlers {
		got = append(got, fmt.Sprintf("%q rro=%v userns=%v", h.Name, *h.Features.RecursiveReadOnlyMounts, *h.Features.UserNamespaces))
	}
	want := []string{`"" rro=true userns=false`, `"old" rro=false userns=false`, `"runc" rro=true userns=true`}
	if !slices.Equal(got, want) {
		t.Fatalf("handlers = %q, want %q", got, want)
	}
}

func TestRuntimeDownNamesSocket(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "nsd")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	ep := "unix://" + filepath.Join(dir, "absent.sock")
	r := NewRuntime(ep, "", 0)
	defer r.Close()
	st := r.Get(context.Background())
	if st.Err == nil || !strings.Contains(st.Err.Error(), ep) {
		t.Fatalf("error %v does not name %s", st.Err, ep)
	}
}

type fakeCloud struct {
	cloudsyncv1.UnimplementedCloudSyncServiceServer
	configured bool
}

func (f *fakeCloud) GetNodeAddresses(context.Context, *cloudsyncv1.GetNodeAddressesRequest) (*cloudsyncv1.GetNodeAddressesResponse, error) {
	if !f.configured {
		return nil, status.Error(codes.FailedPrecondition, "no provider")
	}
	a := corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.7"}
	b, _ := a.Marshal()
	return &cloudsyncv1.GetNodeAddressesResponse{Addresses: [][]byte{b}}, nil
}

func (f *fakeCloud) GetInstanceMetadata(context.Context, *cloudsyncv1.GetInstanceMetadataRequest) (*cloudsyncv1.GetInstanceMetadataResponse, error) {
	return &cloudsyncv1.GetInstanceMetadataResponse{ProviderId: "fake://i-1", Zone: "z1"}, nil
}

func TestCloud(t *testing.T) {
	for _, configured := range []bool{true, false} {
		f := &fakeCloud{configured: configured}
		ep := serve(t, func(s *grpc.Server) { cloudsyncv1.RegisterCloudSyncServiceServer(s, f) })
		c := NewCloud(ep, time.Minute)
		st := c.Get(context.Background())
		c.Close()
		if st.Err != nil {
			t.Fatal(st.Err)
		}
		if !configured {
			if !st.NotConfigured {
				t.Fatalf("unconfigured provider: %+v", st)
			}
			continue
		}
		if len(st.Addresses) != 1 || st.Addresses[0].Address != "203.0.113.7" || st.Metadata.GetProviderId() != "fake://i-1" {
			t.Fatalf("state = %+v", st)
		}
	}
}

// Images are largest first and equal sizes by descending ID, whatever order
// the runtime lists them in, as the kubelet sorts them.
func TestContainerImagesOrder(t *testing.T) {
	img := func(id string, size uint64) *runtimeapi.Image {
		return &runtimeapi.Image{Id: id, RepoTags: []string{id + ":1"}, Size: size}
	}
	in := []*runtimeapi.Image{img("a", 10), img("c", 10), img("big", 99), img("b", 10)}
	want := "big:1 c:1 b:1 a:1"
	for _, order := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}} {
		var list []*runtimeapi.Image
		for _, i := range order {
			list = append(list, in[i])
		}
		var got []string
		for _, c := range ContainerImages(list) {
			got = append(got, c.Names[0])
		}
		if strings.Join(got, " ") != want {
			t.Fatalf("order %v: %v, want %s", order, got, want)
		}
	}
}
