package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/service/servicetest"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	cloudsyncv1 "github.com/microlet/microlet/proto/microlet/cloudsync/v1"
	nodestatusv1 "github.com/microlet/microlet/proto/microlet/nodestatus/v1"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

// patience is how long a test waits for something the agent does on its
// own; generous for a loaded 2-core machine.
const patience = 60 * time.Second

// fakeCRI is a CRI runtime on a real unix socket whose readiness a test flips.
type fakeCRI struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer
	mu    sync.Mutex
	ready bool
	// podCIDRs are the UpdateRuntimeConfig pod CIDRs received, in order;
	// statusCalls counts Status calls (one per fresh reading).
	podCIDRs    []string
	statusCalls int
	// images, when set, are listed instead of one busybox image, rotated
	// by one at every call as a runtime may list them in any order.
	images     []*runtimeapi.Image
	imageCalls int
}

func (f *fakeCRI) setReady(r bool) { f.mu.Lock(); f.ready = r; f.mu.Unlock() }

func (f *fakeCRI) UpdateRuntimeConfig(_ context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.podCIDRs = append(f.podCIDRs, req.GetRuntimeConfig().GetNetworkConfig().GetPodCidr())
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

// received returns the pod CIDRs received so far and the Status call count.
func (f *fakeCRI) received() ([]string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.podCIDRs...), f.statusCalls
}

func (f *fakeCRI) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "fakecri", RuntimeVersion: "0.1", RuntimeApiVersion: "v1"}, nil
}

func (f *fakeCRI) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statusCalls++
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: f.ready, Reason: "Starting"},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}}, nil
}

// ImageFsInfo answers k8s.io/cri-client's connection check of the image
// service.
func (f *fakeCRI) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

func (f *fakeCRI) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.images); n > 0 {
		f.imageCalls++
		k := f.imageCalls % n
		return &runtimeapi.ListImagesResponse{Images: append(slices.Clone(f.images[k:]), f.images[:k]...)}, nil
	}
	return &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{{Id: "i1", RepoTags: []string{"busybox:1"}, Size: 1 << 20}}}, nil
}

// fakeCloud is cloudsyncd on a real unix socket with addresses a test changes.
type fakeCloud struct {
	cloudsyncv1.UnimplementedCloudSyncServiceServer
	mu    sync.Mutex
	addrs []corev1.NodeAddress
}

func (f *fakeCloud) set(a ...corev1.NodeAddress) { f.mu.Lock(); f.addrs = a; f.mu.Unlock() }

func (f *fakeCloud) GetNodeAddresses(context.Context, *cloudsyncv1.GetNodeAddressesRequest) (*cloudsyncv1.GetNodeAddressesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &cloudsyncv1.GetNodeAddressesResponse{}
	for _, a := range f.addrs {
		b, err := a.Marshal()
		if err != nil {
			return nil, err
		}
		resp.Addresses = append(resp.Addresses, b)
	}
	return resp, nil
}

func (f *fakeCloud) GetInstanceMetadata(context.Context, *cloudsyncv1.GetInstanceMetadataRequest) (*cloudsyncv1.GetInstanceMetadataResponse, error) {
	return &cloudsyncv1.GetInstanceMetadataResponse{ProviderId: "fake://i-123", InstanceType: "m.small", Zone: "zone-a", Region: "region-1"}, nil
}

// rig runs a nodestatusd Server in-process on real unix sockets, with a
// fake CRI and a fake cloudsyncd beside it in the same short run dir.
type rig struct {
	t      testing.TB
	dir    string
	cri    *fakeCRI
	cloud  *fakeCloud
	logs   *testenv.LockedBuffer // the service's warnings and errors, also in t.Log
	client nodestatusv1.NodeStatusServiceClient
	srv    *Server
}

type rigOpts struct {
	kubeconfig string
	node       string
	noCRI      bool
	noCloud    bool
	// criNotReady starts the fake runtime with RuntimeReady=false.
	criNotReady bool
	mutate      func(*Config)
	// images are the fake runtime's images (default: one busybox image).
	images []*runtimeapi.Image
}

func startRig(t testing.TB, o rigOpts) *rig {
	t.Helper()
	dir := testenv.ShortDir(t, "nsd")
	r := &rig{t: t, dir: dir, cri: &fakeCRI{ready: !o.criNotReady, images: o.images}, cloud: &fakeCloud{}}
	if !o.noCRI {
		servicetest.Serve(t, filepath.Join(dir, "runtime.sock"), func(s *grpc.Server) {
			runtimeapi.RegisterRuntimeServiceServer(s, r.cri)
			runtimeapi.RegisterImageServiceServer(s, r.cri)
		})
	}
	if !o.noCloud {
		servicetest.Serve(t, filepath.Join(dir, "cloudsyncd.sock"), func(s *grpc.Server) { cloudsyncv1.RegisterCloudSyncServiceServer(s, r.cloud) })
	}
	s := New()
	s.cfg.RunDir = dir
	s.cfg.NodeName = o.node
	s.cfg.Kubeconfig = o.kubeconfig
	s.cfg.Socket = filepath.Join(dir, "nodestatusd.sock")
	s.cfg.NodeStatusUpdateFrequency = time.Second
	if o.mutate != nil {
		o.mutate(s.cfg)
	}
	r.srv = s
	running := servicetest.Start(t, s, s.cfg.Socket, servicetest.WithLogLevel(slog.LevelWarn))
	r.logs = running.Logs
	cc := running.Dial(t)
	r.client = nodestatusv1.NewNodeStatusServiceClient(cc)
	return r
}

// getNode asks the service for its Node, waiting for the first one.
func (r *rig) getNode(name string) *corev1.Node {
	r.t.Helper()
	var n *corev1.Node
	testenv.Eventually(r.t, "GetNode answers", patience, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := r.client.GetNode(ctx, &nodestatusv1.GetNodeRequest{NodeName: name})
		if status.Code(err) == codes.Unavailable {
			return err
		}
		if err != nil {
			r.t.Fatalf("GetNode: %v", err)
		}
		if n, err = NodeFromBytes(resp.GetNode()); err != nil {
			r.t.Fatal(err)
		}
		return nil
	})
	return n
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func condition(n *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// eventually polls f until it returns nil, for up to patience.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	testenv.Eventually(t, what, patience, f)
}
