package server_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv/registry"
	"github.com/microlet/microlet/services/runtime-shim/internal/shimtest"
)

// TestSecurityAndResources creates a sandbox and a container with every
// security and resource setting podsyncd sends, and checks both what Docker
// was asked for (inspect) and what the process inside really gets.
func TestSecurityAndResources(t *testing.T) {
	env := shimtest.Get(t)
	sh := env.StartShim(t)
	ctx := ctxT(t, 10*time.Minute)
	rt := sh.Runtime
	image := env.Registry.Image(registry.Busybox)
	get(sh.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}})).must(t)

	profile := filepath.Join(t.TempDir(), "allow.json")
	if err := os.WriteFile(profile, []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	user := func(v int64) *runtimeapi.Int64Value { return &runtimeapi.Int64Value{Value: v} }

	pc := podConfig("secure", t.TempDir())
	pc.Linux = &runtimeapi.LinuxPodSandboxConfig{
		Sysctls: map[string]string{"net.ipv4.ip_unprivileged_port_start": "80"},
		SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			RunAsUser: user(1000), RunAsGroup: user(3000), SupplementalGroups: []int64{2000, 5},
			Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
		},
	}
	t.Log("running the sandbox")
	sb := get(rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})).must(t)
	sbIns, err := env.Docker.ContainerInspect(ctx, sb.PodSandboxId, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := sbIns.Container.Config.User; u != "1000:3000" {
		t.Errorf("sandbox user = %q, want 1000:3000", u)
	}
	if g := sbIns.Container.HostConfig.GroupAdd; !slices.Equal(g, []string{"2000", "5"}) {
		t.Errorf("sandbox groups = %v", g)
	}
	if v := sbIns.Container.HostConfig.Sysctls["net.ipv4.ip_unprivileged_port_start"]; v != "80" {
		t.Errorf("sandbox sysctls = %v", sbIns.Container.HostConfig.Sysctls)
	}

	const memLimit = 64 << 20
	cc := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "secure"},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Command:  []string{"sleep", "3600"},
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{
				CpuShares: 512, CpuQuota: 50000, CpuPeriod: 100000, MemoryLimitInBytes: memLimit, OomScoreAdj: 500,
			},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				RunAsUser: user(1000), RunAsGroup: user(3000), SupplementalGroups: []int64{2000, 5},
				Capabilities:   &runtimeapi.Capability{AddCapabilities: []string{"NET_ADMIN"}, DropCapabilities: []string{"CHOWN"}},
				ReadonlyRootfs: true, NoNewPrivs: true,
				Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: profile},
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Ipc: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER},
			},
		},
	}
	t.Log("creating the container")
	c := get(rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: cc, SandboxConfig: pc})).must(t)
	ins, err := env.Docker.ContainerInspect(ctx, c.ContainerId, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := ins.Container.HostConfig
	if u := ins.Container.Config.User; u != "1000:3000" {
		t.Errorf("user = %q, want 1000:3000", u)
	}
	// Docker records capabilities with or without the CAP_ prefix, by version.
	hasCap := func(list []string, c string) bool { return slices.Contains(list, c) || slices.Contains(list, "CAP_"+c) }
	if !slices.Equal(hc.GroupAdd, []string{"2000", "5"}) || !hasCap(hc.CapAdd, "NET_ADMIN") || !hasCap(hc.CapDrop, "CHOWN") || !hc.ReadonlyRootfs {
		t.Errorf("groups %v, caps +%v -%v, read-only root %v", hc.GroupAdd, hc.CapAdd, hc.CapDrop, hc.ReadonlyRootfs)
	}
	if !slices.Contains(hc.SecurityOpt, "no-new-privileges") || !slices.ContainsFunc(hc.SecurityOpt, func(o string) bool { return strings.HasPrefix(o, "seccomp=") && strings.Contains(o, "SCMP_ACT_ALLOW") }) {
		t.Errorf("security options %v lack no-new-privileges or the Localhost profile", hc.SecurityOpt)
	}
	if hc.CPUShares != 512 || hc.CPUQuota != 50000 || hc.CPUPeriod != 100000 || hc.Memory != memLimit {
		t.Errorf("resources: shares %d quota %d period %d memory %d", hc.CPUShares, hc.CPUQuota, hc.CPUPeriod, hc.Memory)
	}
	if hc.OomScoreAdj != 500 {
		t.Errorf("oom_score_adj = %d, want 500", hc.OomScoreAdj)
	}
	t.Log("starting the container")
	get(rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})).must(t)

	run := func(script string) (string, int32) {
		t.Helper()
		r := get(rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: c.ContainerId, Cmd: []string{"sh", "-c", script}, Timeout: 30})).must(t)
		return strings.TrimSpace(string(r.Stdout) + string(r.Stderr)), r.ExitCode
	}
	if out, _ := run("id -u; id -g; id -G"); !regexp.MustCompile(`^1000\n3000\n`).MatchString(out) || !slices.Contains(strings.Fields(out)[2:], "2000") || !slices.Contains(strings.Fields(out)[2:], "5") {
		t.Errorf("id -u, -g, -G = %q, want uid 1000, gid 3000, groups 2000 and 5", out)
	}
	if out, code := run("echo x > /written"); code == 0 {
		t.Errorf("write to the read-only root succeeded: %q", out)
	}
	if out, _ := run("grep NoNewPrivs /proc/self/status"); !strings.HasSuffix(out, "1") {
		t.Errorf("NoNewPrivs: %q", out)
	}
	if out, _ := run("cat /proc/1/oom_score_adj"); out != "500" {
		t.Errorf("oom_score_adj inside = %q, want 500", out)
	}
	if out, _ := run("cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"); out != "67108864" {
		t.Errorf("memory limit inside = %q, want 67108864", out)
	}
	st := get(rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.ContainerId})).must(t)
	if r := st.Status.GetResources().GetLinux(); r.GetMemoryLimitInBytes() != memLimit || r.GetCpuShares() != 512 || r.GetOomScoreAdj() != 500 {
		t.Errorf("ContainerStatus resources = %+v", r)
	}

	// Settings Docker cannot honour are refused, naming the field.
	bad := func(mut func(sc *runtimeapi.LinuxContainerSecurityContext), field string) {
		t.Helper()
		cfg := cc
		cfg.Metadata = &runtimeapi.ContainerMetadata{Name: "bad"}
		cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{RunAsUser: user(1)}
		mut(cfg.Linux.SecurityContext)
		_, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: cfg, SandboxConfig: pc})
		wantCode(t, err, codes.InvalidArgument, field)
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %v does not name %s", err, field)
		}
	}
	bad(func(sc *runtimeapi.LinuxContainerSecurityContext) {
		sc.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: filepath.Join(t.TempDir(), "missing.json")}
	}, "seccomp.localhost_ref")
	bad(func(sc *runtimeapi.LinuxContainerSecurityContext) {
		sc.SupplementalGroupsPolicy = runtimeapi.SupplementalGroupsPolicy_Strict
	}, "supplemental_groups_policy")
	bad(func(sc *runtimeapi.LinuxContainerSecurityContext) {
		sc.RunAsUser, sc.RunAsGroup = nil, user(5)
	}, "run_as_group")
}
