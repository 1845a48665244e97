package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestUpdateContainerResources resizes a running container in place (CPU
// shares, CFS quota, memory limit up and down, the quota lifted) and checks
// the cgroup files the process sees (cgroup v1 or v2), ContainerStatus, and
// that refused values are InvalidArgument naming the field.
func TestUpdateContainerResources(t *testing.T) {
	ctx, sh, image := busyboxShim(t, 5*time.Minute)
	rt := sh.Runtime
	pc := podConfig("resize", t.TempDir())
	sbID := runSandbox(ctx, t, rt, pc)
	cc := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "resize"},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Command:  []string{"sleep", "3600"},
		Linux: &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
			CpuShares: 256, CpuQuota: 20000, CpuPeriod: 100000, MemoryLimitInBytes: 32 << 20,
		}},
	}
	c := get(rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sbID, Config: cc, SandboxConfig: pc})).must(t)
	get(rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})).must(t)

	// read returns what the container's own cgroup files say.
	read := func() (shares, quota, memory string) {
		t.Helper()
		script := `if [ -f /sys/fs/cgroup/cpu.max ]; then cat /sys/fs/cgroup/cpu.weight /sys/fs/cgroup/cpu.max /sys/fs/cgroup/memory.max;
else cat /sys/fs/cgroup/cpu/cpu.shares /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/memory/memory.limit_in_bytes; fi`
		ex := get(rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: c.ContainerId, Cmd: []string{"sh", "-c", script}, Timeout: 30})).must(t)
		f := strings.Fields(string(ex.Stdout))
		if ex.ExitCode != 0 || len(f) < 3 {
			t.Fatalf("reading cgroups: %d %q %q", ex.ExitCode, ex.Stdout, ex.Stderr)
		}
		return f[0], f[1], f[len(f)-1]
	}
	v2 := func() bool {
		ex := get(rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: c.ContainerId, Cmd: []string{"test", "-f", "/sys/fs/cgroup/cpu.max"}, Timeout: 30})).must(t)
		return ex.ExitCode == 0
	}()
	check := func(step string, want *runtimeapi.LinuxContainerResources) {
		t.Helper()
		shares, quota, memory := read()
		wantShares, wantQuota := fmt.Sprint(want.CpuShares), fmt.Sprint(want.CpuQuota)
		if want.CpuQuota <= 0 {
			wantQuota = "-1"
		}
		if v2 {
			// runc's conversion of shares to cpu.weight.
			wantShares = fmt.Sprint(1 + ((want.CpuShares-2)*9999)/262142)
			if want.CpuQuota <= 0 {
				wantQuota = "max"
			}
		}
		if shares != wantShares || quota != wantQuota || memory != fmt.Sprint(want.MemoryLimitInBytes) {
			t.Errorf("%s: cgroup shares %s quota %s memory %s, want %s %s %d", step, shares, quota, memory, wantShares, wantQuota, want.MemoryLimitInBytes)
		}
		st := get(rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.ContainerId})).must(t)
		got := st.Status.GetResources().GetLinux()
		if got.GetCpuShares() != want.CpuShares || got.GetMemoryLimitInBytes() != want.MemoryLimitInBytes ||
			(want.CpuQuota > 0 && got.GetCpuQuota() != want.CpuQuota) || (want.CpuQuota <= 0 && got.GetCpuQuota() > 0) {
			t.Errorf("%s: ContainerStatus resources %v, want %v", step, got, want)
		}
	}
	check("created", cc.Linux.Resources)

	for _, step := range []struct {
		name string
		r    *runtimeapi.LinuxContainerResources
	}{
		{"increase", &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuQuota: 150000, CpuPeriod: 100000, MemoryLimitInBytes: 96 << 20}},
		{"decrease", &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuQuota: 10000, CpuPeriod: 100000, MemoryLimitInBytes: 16 << 20}},
		{"no cpu limit", &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuQuota: 0, CpuPeriod: 100000, MemoryLimitInBytes: 20 << 20}},
	} {
		get(rt.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: c.ContainerId, Linux: step.r})).must(t)
		check(step.name, step.r)
	}

	for field, r := range map[string]*runtimeapi.LinuxContainerResources{
		"cpu_shares":            {CpuShares: 1},
		"cpu_quota":             {CpuQuota: 500, CpuPeriod: 100000},
		"cpu_period":            {CpuPeriod: 10},
		"memory_limit_in_bytes": {MemoryLimitInBytes: 1 << 20},
		"cpuset_cpus":           {CpusetCpus: "0-x"},
	} {
		_, err := rt.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: c.ContainerId, Linux: r})
		wantCode(t, err, codes.InvalidArgument, "update with bad "+field)
		if !strings.Contains(status.Convert(err).Message(), "linux.resources."+field) {
			t.Errorf("message does not name %s: %v", field, err)
		}
	}
	check("after refused updates", &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, MemoryLimitInBytes: 20 << 20})
	_, err := rt.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: strings.Repeat("0", 64), Linux: &runtimeapi.LinuxContainerResources{CpuShares: 2}})
	wantCode(t, err, codes.NotFound, "update of an unknown container")
}
