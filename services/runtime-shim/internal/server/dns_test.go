package server_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv/registry"
	"github.com/microlet/microlet/services/runtime-shim/internal/shimtest"
)

// TestHostNetworkDNS runs a host-network sandbox with a DNS config (what
// podsyncd sends for ClusterFirstWithHostNet), which Docker cannot take as
// options, and checks that the container in it reads exactly that config
// while the host's /etc/resolv.conf stays as it was; a pod-network one
// reads exactly its config too. Bad configs are refused naming the field.
func TestHostNetworkDNS(t *testing.T) {
	env := shimtest.Get(t)
	sh := env.StartShim(t)
	ctx := ctxT(t, 5*time.Minute)
	rt := sh.Runtime
	image := env.Registry.Image(registry.Busybox)
	get(sh.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}})).must(t)

	hostBefore, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		t.Fatal(err)
	}
	hostNet := func(name string, dns *runtimeapi.DNSConfig) *runtimeapi.PodSandboxConfig {
		pc := podConfig(name, t.TempDir())
		pc.Hostname = ""
		pc.DnsConfig = dns
		pc.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
		}}
		return pc
	}

	for field, dns := range map[string]*runtimeapi.DNSConfig{
		"config.dns_config.servers[1]":  {Servers: []string{"10.96.0.10", "ns.example"}},
		"config.dns_config.options[0]":  {Servers: []string{"10.96.0.10"}, Options: []string{"ndots:5\nnameserver 1.2.3.4"}},
		"config.dns_config.searches[0]": {Searches: []string{"a.example b.example"}},
	} {
		_, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: hostNet("dns-bad", dns)})
		wantCode(t, err, codes.InvalidArgument, field)
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %s", err, field)
		}
	}

	dns := &runtimeapi.DNSConfig{
		Servers:  []string{"10.96.0.10", "fd00::a"},
		Searches: []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"},
		Options:  []string{"ndots:5", "timeout:2"},
	}
	want := "nameserver 10.96.0.10\nnameserver fd00::a\n" +
		"search default.svc.cluster.local svc.cluster.local cluster.local\n" +
		"options ndots:5 timeout:2\n"
	// run starts a sleeping container in a new sandbox of config pc and
	// checks that it reads want as /etc/resolv.conf.
	run := func(what string, pc *runtimeapi.PodSandboxConfig, want string) string {
		sb := get(rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})).must(t)
		t.Cleanup(func() {
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, _ = rt.RemovePodSandbox(cctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId})
		})
		c := get(rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: pc,
			Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: image},
				Command: []string{"sleep", "3600"}, LogPath: "c.log"}})).must(t)
		get(rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})).must(t)
		ex := get(rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: c.ContainerId, Cmd: []string{"cat", "/etc/resolv.conf"}, Timeout: 30})).must(t)
		if ex.ExitCode != 0 || string(ex.Stdout) != want {
			t.Errorf("%s container's /etc/resolv.conf (exit %d, stderr %q):\n%s\nwant:\n%s", what, ex.ExitCode, ex.Stderr, ex.Stdout, want)
		}
		return c.ContainerId
	}

	id := run("host-network", hostNet("dns-hostnet", dns), want)
	// Still the host's network namespace.
	ins, err := env.Docker.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m := ins.Container.HostConfig.NetworkMode; m != "host" {
		t.Errorf("container network mode = %q, want host", m)
	}
	// The shared file is the shim's business, not one of the CRI's mounts.
	cs := get(rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})).must(t)
	for _, m := range cs.Status.Mounts {
		if m.ContainerPath == "/etc/resolv.conf" {
			t.Errorf("ContainerStatus reports the shared resolv.conf as a mount: %+v", m)
		}
	}

	// A pod-network sandbox gets exactly its config too: given searches
	// alone, Docker would add the host's nameservers.
	pn := podConfig("dns-podnet", t.TempDir())
	pn.DnsConfig = &runtimeapi.DNSConfig{Searches: []string{"ns1.svc.cluster.local"}, Options: []string{"ndots:2"}}
	run("pod-network", pn, "search ns1.svc.cluster.local\noptions ndots:2\n")

	hostAfter, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(hostBefore, hostAfter) {
		t.Errorf("host's /etc/resolv.conf changed:\n%s\nwas:\n%s", hostAfter, hostBefore)
	}
}
