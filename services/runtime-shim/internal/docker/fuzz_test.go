package docker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/services/runtime-shim/internal/imagevolume"
)

// fuzzMethods are the CRI calls FuzzCRIRequests makes, by its method
// argument.
var fuzzMethods = []string{"RunPodSandbox", "CreateContainer", "UpdateContainerResources"}

// FuzzCRIRequests sends arbitrary RunPodSandbox, CreateContainer and
// UpdateContainerResources requests (method 0, 1, 2) to a Backend whose
// Docker endpoint is a socket nobody listens on. What the shim checks
// before it asks Docker anything is all that runs: a request it refuses
// must be InvalidArgument; one it lets through reaches Docker and is
// Unavailable, and must then be a request the shim can carry out safely
// (dockerReady). A panic, a hang past the deadline or any other answer
// fails.
func FuzzCRIRequests(f *testing.F) {
	dir := testenv.ShortDir(f, "shfz")
	b, err := New(Options{Host: "unix://" + filepath.Join(dir, "no-docker.sock"), DataDir: filepath.Join(dir, "data"),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = b.Close() })
	// The seeds are testdata/fuzz/FuzzCRIRequests (TestWriteCRISeeds).
	f.Fuzz(func(t *testing.T, method uint8, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		i := int(method) % len(fuzzMethods)
		var req proto.Message
		var call func() error
		switch i {
		case 0:
			r := &runtimeapi.RunPodSandboxRequest{}
			req, call = r, func() error { _, err := b.RunPodSandbox(ctx, r); return err }
		case 1:
			r := &runtimeapi.CreateContainerRequest{}
			req, call = r, func() error { _, err := b.CreateContainer(ctx, r); return err }
		default:
			r := &runtimeapi.UpdateContainerResourcesRequest{}
			req, call = r, func() error { _, err := b.UpdateContainerResources(ctx, r); return err }
		}
		if proto.Unmarshal(data, req) != nil {
			return
		}
		err := call()
		switch status.Code(err) {
		case codes.InvalidArgument:
		case codes.Unavailable:
			if bad := dockerReady(req); bad != "" {
				t.Fatalf("%s let through a request it cannot carry out (%s): %v", fuzzMethods[i], bad, req)
			}
		default:
			t.Fatalf("%s(%v): %v, want InvalidArgument or Unavailable (no Docker)", fuzzMethods[i], req, err)
		}
	})
}

// dockerReady says what in a request the shim accepted it could not carry
// out as asked ("" when nothing): a path Docker's bind syntax
// (host:container:mode) would split, a log file outside the pod's log
// directory, an image sub path outside the image, an environment variable
// whose name would swallow its value, a relative log directory.
func dockerReady(req proto.Message) string {
	switch r := req.(type) {
	case *runtimeapi.RunPodSandboxRequest:
		if d := r.GetConfig().GetLogDirectory(); d != "" && !filepath.IsAbs(d) {
			return "relative log_directory " + d
		}
	case *runtimeapi.CreateContainerRequest:
		c := r.GetConfig()
		if d := r.GetSandboxConfig().GetLogDirectory(); d != "" && !filepath.IsAbs(d) {
			return "relative sandbox log_directory " + d
		}
		if p := c.GetLogPath(); p != "" && !filepath.IsLocal(p) {
			return "log_path outside the log directory: " + p
		}
		for i, m := range c.GetMounts() {
			host := m.GetHostPath()
			if m.GetImage().GetImage() != "" {
				if imagevolume.CheckSubPath(m.GetImageSubPath()) != nil {
					return fmt.Sprintf("mounts[%d].image_sub_path %q", i, m.GetImageSubPath())
				}
				host = "/image"
			}
			if parts := strings.Split(host+":"+m.GetContainerPath()+":rw", ":"); len(parts) != 3 {
				return fmt.Sprintf("mounts[%d] paths with ':' (%q, %q)", i, m.GetHostPath(), m.GetContainerPath())
			}
		}
		for i, e := range c.GetEnvs() {
			if e.GetKey() == "" || strings.ContainsAny(e.GetKey(), "=\x00") {
				return fmt.Sprintf("envs[%d].key %q", i, e.GetKey())
			}
		}
	}
	return ""
}

// criSeeds are what the kubelet (and podsyncd) sends for a pod with one
// container: a sandbox on the pod network with DNS and a port, a container
// with a mount, an environment variable and its log path, a resize; and
// variations of them the shim must refuse before it asks Docker.
func criSeeds() map[string]struct {
	method uint8
	req    proto.Message
} {
	sandbox := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "0b6c4f1e-1111-4c3a-9d5e-2f1a7b8c9d0e", Attempt: 0},
		Hostname:     "web",
		LogDirectory: "/var/log/pods/default_web_0b6c4f1e-1111-4c3a-9d5e-2f1a7b8c9d0e",
		DnsConfig:    &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"default.svc.cluster.local", "svc.cluster.local"}, Options: []string{"ndots:5"}},
		PortMappings: []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 8080, HostPort: 0}},
		Labels:       map[string]string{"io.kubernetes.pod.name": "web"},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/besteffort/pod0b6c4f1e"},
	}
	container := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app", Attempt: 0},
		Image:    &runtimeapi.ImageSpec{Image: "busybox:1.36"},
		Command:  []string{"sh", "-c", "sleep 3600"},
		Envs:     []*runtimeapi.KeyValue{{Key: "MODE", Value: []byte("a=b")}},
		Mounts: []*runtimeapi.Mount{
			{ContainerPath: "/data", HostPath: "/var/lib/kubelet/pods/0b6c4f1e/volumes/kubernetes.io~empty-dir/data"},
			{ContainerPath: "/img", Image: &runtimeapi.ImageSpec{Image: "busybox:1.36"}, ImageSubPath: "bin"},
		},
		LogPath: "app/0.log",
		Linux:   &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{CpuShares: 102, MemoryLimitInBytes: 64 << 20}},
	}
	// withContainer is the container config changed by f, in a
	// CreateContainer request.
	withContainer := func(f func(*runtimeapi.ContainerConfig)) *runtimeapi.CreateContainerRequest {
		c := proto.Clone(container).(*runtimeapi.ContainerConfig)
		f(c)
		return &runtimeapi.CreateContainerRequest{PodSandboxId: "0123456789ab", Config: c, SandboxConfig: sandbox}
	}
	relativeLogDir := proto.Clone(sandbox).(*runtimeapi.PodSandboxConfig)
	relativeLogDir.LogDirectory = "var/log/pods/x"
	return map[string]struct {
		method uint8
		req    proto.Message
	}{
		// Requests the shim must refuse itself, one per rule of dockerReady.
		"refuse-relative-log-directory":  {0, &runtimeapi.RunPodSandboxRequest{Config: relativeLogDir}},
		"refuse-log-path-escaping":       {1, withContainer(func(c *runtimeapi.ContainerConfig) { c.LogPath = "../../../etc/cron.d/x" })},
		"refuse-colon-in-host-path":      {1, withContainer(func(c *runtimeapi.ContainerConfig) { c.Mounts[0].HostPath = "/srv/a:/etc" })},
		"refuse-colon-in-container-path": {1, withContainer(func(c *runtimeapi.ContainerConfig) { c.Mounts[0].ContainerPath = "/data:ro" })},
		"refuse-image-sub-path-escaping": {1, withContainer(func(c *runtimeapi.ContainerConfig) { c.Mounts[1].ImageSubPath = "../../etc" })},
		"refuse-env-key-with-equals":     {1, withContainer(func(c *runtimeapi.ContainerConfig) { c.Envs[0].Key = "A=B" })},

		"RunPodSandbox":   {0, &runtimeapi.RunPodSandboxRequest{Config: sandbox}},
		"CreateContainer": {1, &runtimeapi.CreateContainerRequest{PodSandboxId: "0123456789ab", Config: container, SandboxConfig: sandbox}},
		"UpdateContainerResources": {2, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: "0123456789ab",
			Linux: &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 128 << 20, CpusetCpus: "0-1"}}},
	}
}

// TestWriteCRISeeds writes criSeeds as the committed corpus in
// testdata/fuzz/FuzzCRIRequests (with MICROLET_WRITE_FUZZ_SEEDS=1).
func TestWriteCRISeeds(t *testing.T) {
	if os.Getenv("MICROLET_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set MICROLET_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz/FuzzCRIRequests")
	}
	for name, s := range criSeeds() {
		testenv.WriteFuzzSeed(t, "FuzzCRIRequests", name, s.method, s.req)
	}
}
