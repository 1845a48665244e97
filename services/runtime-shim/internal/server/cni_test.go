package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv/cninet"
	"github.com/microlet/microlet/internal/testenv/registry"
	"github.com/microlet/microlet/services/runtime-shim/internal/cni"
	"github.com/microlet/microlet/services/runtime-shim/internal/shimtest"
)

// hostRules is the iptables and nftables lines naming one of the words
// (a sandbox ID, a pod IP as "<ip>/32").
func hostRules(words ...string) []string {
	var out []string
	for _, cmd := range [][]string{{"iptables-save"}, {"nft", "list", "ruleset"}} {
		b, _ := exec.Command(cmd[0], cmd[1:]...).Output()
		for _, l := range strings.Split(string(b), "\n") {
			for _, w := range words {
				if strings.Contains(l, w) {
					out = append(out, l)
					break
				}
			}
		}
	}
	return out
}

// bridgePorts counts the interfaces enslaved to the bridge.
func bridgePorts(t *testing.T, bridge string) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join("/sys/class/net", bridge, "brif"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0
		}
		t.Fatal(err)
	}
	return len(ents)
}

type cniPod struct {
	Sandbox, Container string
	IP                 string
	Config             *runtimeapi.PodSandboxConfig
}

// runCNIPod starts a sandbox (with the port mappings) and one container
// and waits for nothing else; the sandbox is removed when the test ends.
func runCNIPod(t *testing.T, ctx context.Context, sh *shimtest.Shim, name, image string, cmd []string, ports ...*runtimeapi.PortMapping) *cniPod {
	t.Helper()
	get(sh.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}})).must(t)
	pc := podConfig(name, t.TempDir())
	pc.DnsConfig = nil
	pc.PortMappings = ports
	sb := get(sh.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})).must(t)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = sh.Runtime.StopPodSandbox(cctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId})
		_, _ = sh.Runtime.RemovePodSandbox(cctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId})
	})
	var cmdArgs []string
	if cmd != nil {
		cmdArgs = cmd
	}
	c := get(sh.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: pc,
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: image},
			Command: cmdArgs, LogPath: "c.log"}})).must(t)
	get(sh.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})).must(t)
	st := get(sh.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.PodSandboxId})).must(t)
	return &cniPod{Sandbox: sb.PodSandboxId, Container: c.ContainerId, IP: st.Status.GetNetwork().GetIp(), Config: pc}
}

func networkCondition(t *testing.T, ctx context.Context, sh *shimtest.Shim) *runtimeapi.RuntimeCondition {
	t.Helper()
	st := get(sh.Runtime.Status(ctx, &runtimeapi.StatusRequest{})).must(t)
	for _, c := range st.Status.Conditions {
		if c.Type == runtimeapi.NetworkReady {
			return c
		}
	}
	t.Fatalf("no NetworkReady condition in %v", st.Status.Conditions)
	return nil
}

func freePort(t *testing.T) int32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return int32(l.Addr().(*net.TCPAddr).Port)
}

// checkReleased proves the sandbox left nothing behind: no address in
// host-local's store, no NAT rule naming it, no pinned namespace or record.
func checkReleased(t *testing.T, sh *shimtest.Shim, n *cninet.Net, ipamDir, network string, p *cniPod) {
	t.Helper()
	if cninet.Allocated(t, ipamDir, network)[p.IP] {
		t.Errorf("host-local still holds %s of sandbox %s", p.IP, p.Sandbox)
	}
	if r := hostRules(p.Sandbox, " "+p.IP+"/32 "); len(r) > 0 {
		t.Errorf("host rules of sandbox %s (%s) left: %q", p.Sandbox, p.IP, r)
	}
	for _, sub := range []string{"netns", "sandboxes"} {
		ents, _ := os.ReadDir(filepath.Join(sh.DataDir, "runtime-shim", "cni", sub))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), p.Sandbox) {
				t.Errorf("%s/%s left for sandbox %s", sub, e.Name(), p.Sandbox)
			}
		}
	}
}

func execOut(t *testing.T, ctx context.Context, sh *shimtest.Shim, id string, cmd ...string) (string, error) {
	t.Helper()
	r, err := sh.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 20})
	if err != nil {
		return "", err
	}
	if r.ExitCode != 0 {
		return string(r.Stdout), fmt.Errorf("%q exited %d: %s", cmd, r.ExitCode, r.Stderr)
	}
	return string(r.Stdout), nil
}

// TestCNIPodNetwork: two pods on the real plugins get distinct addresses
// of the configured subnet and reach each other by pod IP; a host port
// answers on the host; stop releases the address, the NAT rules and the
// namespace, and a second stop succeeds.
func TestCNIPodNetwork(t *testing.T) {
	env := shimtest.Get(t)
	n := cninet.New(t)
	n.Install(t, "10-test.conflist", n.Conflist())
	sh := env.StartShim(t, n.ShimArgs()...)
	ctx := ctxT(t, 5*time.Minute)
	if c := networkCondition(t, ctx, sh); !c.Status {
		t.Fatalf("NetworkReady = false with a valid config: %s %s", c.Reason, c.Message)
	}

	hostPort := freePort(t)
	web := runCNIPod(t, ctx, sh, "cni-web", env.Registry.Image(registry.WebServer), nil,
		&runtimeapi.PortMapping{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 80, HostPort: hostPort})
	cl := runCNIPod(t, ctx, sh, "cni-client", env.Registry.Image(registry.Busybox), []string{"sleep", "3600"})
	for _, p := range []*cniPod{web, cl} {
		ip, err := netip.ParseAddr(p.IP)
		if err != nil || !n.Subnet.Contains(ip) {
			t.Fatalf("sandbox %s has IP %q, want one of %s", p.Sandbox, p.IP, n.Subnet)
		}
	}
	if web.IP == cl.IP {
		t.Fatalf("both pods got %s", web.IP)
	}
	// A retried RunPodSandbox answers the running sandbox and attaches nothing more.
	again := get(sh.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: web.Config})).must(t)
	if again.PodSandboxId != web.Sandbox {
		t.Fatalf("retried RunPodSandbox: %s, want %s", again.PodSandboxId, web.Sandbox)
	}
	held := cninet.Allocated(t, n.IPAMDir, n.Name)
	if !held[web.IP] || !held[cl.IP] || len(held) != 2 {
		t.Fatalf("host-local holds %v, want exactly %s and %s", held, web.IP, cl.IP)
	}
	// Pod to pod by IP.
	eventually(t, "client pod fetches the web pod's page by pod IP", func() error {
		// busybox-static's wget crashes (glibc's resolver in a static
		// binary); nc speaks the HTTP by hand.
		out, err := execOut(t, ctx, sh, cl.Container, "sh", "-c", `printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 `+web.IP+` 80`)
		if err != nil {
			return err
		}
		if !strings.HasSuffix(out, "\r\n\r\n"+registry.WebServerPage) {
			return fmt.Errorf("got %q", out)
		}
		return nil
	})
	// The pod's own view: eth0 carries the address.
	if out, err := execOut(t, ctx, sh, cl.Container, "ip", "-o", "-4", "addr", "show", "eth0"); err != nil || !strings.Contains(out, cl.IP+"/") {
		t.Fatalf("eth0 in the client pod: %q %v", out, err)
	}
	// Host port on the host.
	eventually(t, "host port answers on the host", func() error {
		hc := http.Client{Timeout: 5 * time.Second}
		resp, err := hc.Get("http://127.0.0.1:" + strconv.Itoa(int(hostPort)) + "/")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if string(b) != registry.WebServerPage {
			return fmt.Errorf("got %d %q", resp.StatusCode, b)
		}
		return nil
	})
	if r := hostRules(web.Sandbox); len(r) == 0 {
		t.Fatalf("no NAT rule names the host-port sandbox %s", web.Sandbox)
	}
	if r := hostRules(" " + cl.IP + "/32 "); len(r) == 0 {
		t.Fatalf("no firewall rule names the client pod's %s", cl.IP)
	}

	for _, p := range []*cniPod{web, cl} {
		get(sh.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Sandbox})).must(t)
		checkReleased(t, sh, n, n.IPAMDir, n.Name, p)
		get(sh.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Sandbox})).must(t)
		st := get(sh.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.Sandbox})).must(t)
		if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.Status.GetNetwork().GetIp() != "" {
			t.Errorf("stopped sandbox: state %v, IP %q", st.Status.State, st.Status.GetNetwork().GetIp())
		}
		get(sh.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Sandbox})).must(t)
	}
	if got := cninet.Allocated(t, n.IPAMDir, n.Name); len(got) != 0 {
		t.Errorf("host-local still holds %v", got)
	}
	if p := bridgePorts(t, n.Bridge); p != 0 {
		t.Errorf("bridge %s still has %d ports", n.Bridge, p)
	}
}

// TestCNIShimRestart kills runtime-shim after ADD and stops the sandboxes
// through a new shim on the same data dir: with the pause container still
// running, with it killed (a Docker restart), and with it killed and its
// pinned namespace gone too (a reboot); a sandbox whose container and
// checkpoint vanished meanwhile is torn down by the new shim on its own.
// Nothing leaks in any case.
func TestCNIShimRestart(t *testing.T) {
	env := shimtest.Get(t)
	n := cninet.New(t)
	n.Install(t, "10-test.conflist", n.Conflist())
	sh := env.StartShim(t, n.ShimArgs()...)
	ctx := ctxT(t, 5*time.Minute)
	img := env.Registry.Image(registry.Busybox)
	running := runCNIPod(t, ctx, sh, "cni-running", img, []string{"sleep", "3600"},
		&runtimeapi.PortMapping{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 8080, HostPort: freePort(t)})
	killed := runCNIPod(t, ctx, sh, "cni-killed", img, []string{"sleep", "3600"},
		&runtimeapi.PortMapping{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 8080, HostPort: freePort(t)})
	gone := runCNIPod(t, ctx, sh, "cni-gone", img, []string{"sleep", "3600"},
		&runtimeapi.PortMapping{Protocol: runtimeapi.Protocol_UDP, ContainerPort: 53, HostPort: freePort(t)})
	orphan := runCNIPod(t, ctx, sh, "cni-orphan", img, []string{"sleep", "3600"})
	if held := cninet.Allocated(t, n.IPAMDir, n.Name); len(held) != 4 {
		t.Fatalf("host-local holds %v, want 4 addresses", held)
	}

	sh.Kill()
	// The orphan's container and checkpoint go while no shim runs (a crash
	// inside RemovePodSandbox): the next shim finds only its network record
	// and tears it down before it serves.
	if _, err := env.Docker.ContainerRemove(ctx, orphan.Sandbox, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(sh.DataDir, "runtime-shim", "sandboxes", orphan.Sandbox+".json")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*cniPod{killed, gone} {
		if _, err := env.Docker.ContainerKill(ctx, p.Sandbox, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
			t.Fatal(err)
		}
	}
	pin := filepath.Join(sh.DataDir, "runtime-shim", "cni", "netns", gone.Sandbox)
	if err := unix.Unmount(pin, unix.MNT_DETACH); err != nil {
		t.Fatalf("unmount the pinned namespace %s: %v", pin, err)
	}
	sh2 := env.StartShim(t, n.ShimArgs("--data-dir="+sh.DataDir)...)
	checkReleased(t, sh2, n, n.IPAMDir, n.Name, orphan)
	for _, p := range []*cniPod{running, killed, gone} {
		st := get(sh2.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.Sandbox})).must(t)
		if st.Status.GetNetwork().GetIp() != p.IP {
			t.Errorf("after the restart sandbox %s reports IP %q, had %s", p.Sandbox, st.Status.GetNetwork().GetIp(), p.IP)
		}
		get(sh2.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Sandbox})).must(t)
		checkReleased(t, sh2, n, n.IPAMDir, n.Name, p)
		get(sh2.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Sandbox})).must(t)
		get(sh2.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Sandbox})).must(t)
	}
	if got := cninet.Allocated(t, n.IPAMDir, n.Name); len(got) != 0 {
		t.Errorf("host-local still holds %v", got)
	}
	if p := bridgePorts(t, n.Bridge); p != 0 {
		t.Errorf("bridge %s still has %d ports", n.Bridge, p)
	}
}

// TestCNINotReady: no config, a broken config and a config naming a
// missing plugin each keep NetworkReady false with a message naming the
// problem and fail pod-network sandboxes (host-network ones still run);
// fixing the directory makes the network ready without a restart.
func TestCNINotReady(t *testing.T) {
	env := shimtest.Get(t)
	n := cninet.New(t)
	sh := env.StartShim(t, n.ShimArgs()...)
	ctx := ctxT(t, 5*time.Minute)
	img := env.Registry.Image(registry.Busybox)
	get(sh.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: img}})).must(t)

	notReady := func(want string) {
		t.Helper()
		c := networkCondition(t, ctx, sh)
		if c.Status || c.Reason != "NetworkPluginNotReady" || !strings.Contains(c.Message, want) {
			t.Fatalf("NetworkReady = %v %q %q, want false NetworkPluginNotReady naming %q", c.Status, c.Reason, c.Message, want)
		}
		pc := podConfig("cni-notready", t.TempDir())
		_, err := sh.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), want) {
			t.Fatalf("RunPodSandbox = %v, want FailedPrecondition naming %q", err, want)
		}
	}
	notReady(n.ConfDir)

	n.Install(t, "10-broken.conflist", []byte(`{"cniVersion": "1.0.0", "name": "broken", "plugins": [`))
	notReady("10-broken.conflist")

	n.Install(t, "05-missing.conflist", []byte(`{"cniVersion": "1.0.0", "name": "missing", "plugins": [{"type": "no-such-plugin"}]}`))
	notReady(`plugin "no-such-plugin" not found`)

	// A host-network pod needs no pod network.
	host := podConfig("cni-hostnet", t.TempDir())
	host.DnsConfig = nil
	host.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}
	hs := get(sh.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: host})).must(t)
	get(sh.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: hs.PodSandboxId})).must(t)
	get(sh.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: hs.PodSandboxId})).must(t)

	// Fixed: the missing plugin's file goes, a valid one sorts before the broken one.
	if err := os.Remove(filepath.Join(n.ConfDir, "05-missing.conflist")); err != nil {
		t.Fatal(err)
	}
	n.Install(t, "07-test.conflist", n.Conflist())
	if c := networkCondition(t, ctx, sh); !c.Status {
		t.Fatalf("NetworkReady still false after the fix: %s %s", c.Reason, c.Message)
	}
	p := runCNIPod(t, ctx, sh, "cni-fixed", img, []string{"sleep", "3600"})
	if ip, err := netip.ParseAddr(p.IP); err != nil || !n.Subnet.Contains(ip) {
		t.Fatalf("pod IP %q not in %s", p.IP, n.Subnet)
	}
	get(sh.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Sandbox})).must(t)
	checkReleased(t, sh, n, n.IPAMDir, n.Name, p)
}

// TestCNIPodCIDR: with --pod-network=bridge and an empty configuration
// directory, UpdateRuntimeConfig's pod CIDR makes the shim write the
// bridge network, after which pods get addresses of that CIDR; an
// operator's own config is left to win.
func TestCNIPodCIDR(t *testing.T) {
	env := shimtest.Get(t)
	n := cninet.New(t)
	sh := env.StartShim(t, n.ShimArgs("--pod-network=bridge", "--cni-bridge="+n.Bridge)...)
	ctx := ctxT(t, 5*time.Minute)
	if c := networkCondition(t, ctx, sh); c.Status {
		t.Fatal("NetworkReady before any pod CIDR")
	}
	_, err := sh.Runtime.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: &runtimeapi.RuntimeConfig{
		NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.244.0.0/33"}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "10.244.0.0/33") {
		t.Fatalf("bad CIDR: %v, want InvalidArgument naming it", err)
	}
	get(sh.Runtime.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: &runtimeapi.RuntimeConfig{
		NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: n.Subnet.String()}}})).must(t)
	if _, err := os.Stat(filepath.Join(n.ConfDir, cni.GeneratedFile)); err != nil {
		t.Fatalf("generated config: %v", err)
	}
	if c := networkCondition(t, ctx, sh); !c.Status {
		t.Fatalf("NetworkReady false after the pod CIDR: %s", c.Message)
	}
	ipamDir := filepath.Join(sh.DataDir, "runtime-shim", "cni", "networks")
	p := runCNIPod(t, ctx, sh, "cni-cidr", env.Registry.Image(registry.Busybox), []string{"sleep", "3600"})
	if ip, err := netip.ParseAddr(p.IP); err != nil || !n.Subnet.Contains(ip) || !cninet.Allocated(t, ipamDir, cni.GeneratedNetwork)[p.IP] {
		t.Fatalf("pod IP %q: want one of %s held by host-local in %s", p.IP, n.Subnet, ipamDir)
	}
	get(sh.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Sandbox})).must(t)
	checkReleased(t, sh, n, ipamDir, cni.GeneratedNetwork, p)

	// An operator's config wins over the generated one, whatever its name.
	n.Install(t, "zz-operator.conflist", n.Conflist())
	p2 := runCNIPod(t, ctx, sh, "cni-operator", env.Registry.Image(registry.Busybox), []string{"sleep", "3600"})
	if !cninet.Allocated(t, n.IPAMDir, n.Name)[p2.IP] {
		t.Fatalf("pod IP %q not from the operator's network", p2.IP)
	}
	get(sh.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p2.Sandbox})).must(t)
	checkReleased(t, sh, n, n.IPAMDir, n.Name, p2)
}

// TestCNICheckRepairs: a retried RunPodSandbox of a running sandbox runs
// CNI CHECK; with the pod's veth deleted behind the shim's back CHECK
// fails, and the sandbox is torn down and attached again: the pod has an
// eth0 with an address again, and host-local holds exactly that one.
func TestCNICheckRepairs(t *testing.T) {
	env := shimtest.Get(t)
	n := cninet.New(t)
	n.Install(t, "10-test.conflist", n.Conflist())
	sh := env.StartShim(t, n.ShimArgs()...)
	ctx := ctxT(t, 5*time.Minute)
	p := runCNIPod(t, ctx, sh, "cni-check", env.Registry.Image(registry.Busybox), []string{"sleep", "3600"})

	// Everything in place: CHECK passes, the sandbox keeps its address.
	get(sh.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: p.Config})).must(t)
	if st := get(sh.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.Sandbox})).must(t); st.Status.GetNetwork().GetIp() != p.IP {
		t.Fatalf("IP %q after a passing CHECK, had %s", st.Status.GetNetwork().GetIp(), p.IP)
	}

	ports, err := os.ReadDir(filepath.Join("/sys/class/net", n.Bridge, "brif"))
	if err != nil || len(ports) != 1 {
		t.Fatalf("bridge ports: %v %v", ports, err)
	}
	if out, err := exec.Command("ip", "link", "del", ports[0].Name()).CombinedOutput(); err != nil {
		t.Fatalf("delete the pod's veth: %v %s", err, out)
	}
	if out, err := execOut(t, ctx, sh, p.Container, "ip", "-o", "link", "show", "eth0"); err == nil {
		t.Fatalf("eth0 still there after its peer went: %q", out)
	}

	again := get(sh.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: p.Config})).must(t)
	if again.PodSandboxId != p.Sandbox {
		t.Fatalf("retried RunPodSandbox: %s, want %s", again.PodSandboxId, p.Sandbox)
	}
	st := get(sh.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.Sandbox})).must(t)
	ip := st.Status.GetNetwork().GetIp()
	if held := cninet.Allocated(t, n.IPAMDir, n.Name); len(held) != 1 || !held[ip] {
		t.Fatalf("host-local holds %v, want only the new attachment's %q", held, ip)
	}
	if out, err := execOut(t, ctx, sh, p.Container, "ip", "-o", "-4", "addr", "show", "eth0"); err != nil || !strings.Contains(out, ip+"/") {
		t.Fatalf("eth0 after the repair: %q %v", out, err)
	}
	get(sh.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Sandbox})).must(t)
	p.IP = ip
	checkReleased(t, sh, n, n.IPAMDir, n.Name, p)
}
