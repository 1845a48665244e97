package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/services/runtime-shim/internal/shimtest"
)

// TestStats checks the stats calls against the real Docker, seen through a
// proxy on the shim's Docker socket: the containers' samples are asked
// for all at once (the proxy holds the stats calls until all six are in
// flight, so a shim asking one by one would be stuck at one), once each,
// and carry the time Docker read them; memory has RSS and page faults; the
// writable layer shows the file each container wrote; a pod with a cgroup
// of its own reports that cgroup's usage, which does not drop when a
// container exits; pods report their network.
func TestStats(t *testing.T) {
	env := shimtest.Get(t)
	ctx := ctxT(t, 10*time.Minute)
	info, err := env.Docker.Info(ctx, client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	px := startDockerProxy(t, env)
	sh := env.StartShim(t, "--docker-host=unix://"+px.sock)

	// Pod 0 gets a cgroup parent of its own, as the kubelet gives every
	// pod; pod 1 none, as podsyncd runs pods today.
	var parent string
	if strings.EqualFold(info.Info.CgroupDriver, "cgroupfs") {
		parent = "/microlet-stats-" + env.Instance
		t.Cleanup(func() { removeCgroupDirs(parent) })
	} else {
		t.Logf("Docker's cgroup driver is %s: pod cgroups not tested", info.Info.CgroupDriver)
	}
	tag := fmt.Sprintf("t%d", time.Now().UnixNano()%1e6)
	pods := runStatsPods(t, env, sh, tag, 2, 3, func(i int) string {
		if i == 0 {
			return parent
		}
		return ""
	}, func(pod, ctr int) bool { return pod == 0 && ctr == 0 })
	var ids []string
	for _, p := range pods {
		ids = append(ids, p.containers...)
	}
	eventually(t, "containers running", func() error {
		r, err := sh.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
			LabelSelector: map[string]string{"stats-test": tag},
			State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		}})
		if err != nil {
			return err
		}
		if len(r.Containers) != len(ids) {
			return fmt.Errorf("%d of %d running", len(r.Containers), len(ids))
		}
		return nil
	})

	cf := &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"stats-test": tag}}}
	t.Run("containers at once", func(t *testing.T) {
		px.setGate(len(ids))
		r, err := sh.Runtime.ListContainerStats(ctx, cf)
		if err != nil {
			t.Fatal(err)
		}
		maxIn, calls := px.counts()
		if maxIn != len(ids) {
			t.Errorf("%d Docker stats calls were in flight at most, want all %d at once", maxIn, len(ids))
		}
		for _, id := range ids {
			if calls[id] != 1 {
				t.Errorf("container %s: %d stats calls, want 1", id[:12], calls[id])
			}
		}
		if len(r.Stats) != len(ids) {
			t.Fatalf("%d stats, want %d", len(r.Stats), len(ids))
		}
		for _, s := range r.Stats {
			id := s.GetAttributes().GetId()
			read := px.readTime(id)
			if read.IsZero() {
				t.Errorf("%s: no sample seen through the proxy", id[:12])
				continue
			}
			if s.Cpu.GetTimestamp() != read.UnixNano() || s.Memory.GetTimestamp() != read.UnixNano() {
				t.Errorf("%s: timestamps cpu %d memory %d, want Docker's read time %d", id[:12], s.Cpu.GetTimestamp(), s.Memory.GetTimestamp(), read.UnixNano())
			}
			m := s.GetMemory()
			if s.Cpu.GetUsageCoreNanoSeconds().GetValue() == 0 || m.GetUsageBytes().GetValue() == 0 || m.GetWorkingSetBytes().GetValue() == 0 ||
				m.GetRssBytes().GetValue() == 0 || m.GetPageFaults().GetValue() == 0 {
				t.Errorf("%s: cpu %v memory %v: want non-zero usage, working set, RSS and page faults", id[:12], s.Cpu, m)
			}
		}
	})

	t.Run("writable layer", func(t *testing.T) {
		eventually(t, "writable layers holding the 2 MiB file", func() error {
			r, err := sh.Runtime.ListContainerStats(ctx, cf)
			if err != nil {
				return err
			}
			for _, s := range r.Stats {
				wl := s.GetWritableLayer()
				if wl.GetFsId().GetMountpoint() != info.Info.DockerRootDir {
					return fmt.Errorf("%s: mount point %q, want Docker's root dir %q", s.Attributes.Id[:12], wl.GetFsId().GetMountpoint(), info.Info.DockerRootDir)
				}
				if wl.GetUsedBytes().GetValue() < 2<<20 || wl.GetTimestamp() == 0 {
					return fmt.Errorf("%s: writable layer %v, want at least 2 MiB used", s.Attributes.Id[:12], wl)
				}
				// The file and the directories Docker makes in every layer;
				// no inode count at all where the layer is not visible.
				if wl.InodesUsed != nil && wl.InodesUsed.Value < 2 {
					return fmt.Errorf("%s: %d inodes used", s.Attributes.Id[:12], wl.InodesUsed.Value)
				}
			}
			return nil
		})
	})

	pf := &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{LabelSelector: map[string]string{"stats": tag}}}
	podStats := func(t *testing.T) map[string]*runtimeapi.PodSandboxStats {
		t.Helper()
		r, err := sh.Runtime.ListPodSandboxStats(ctx, pf)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*runtimeapi.PodSandboxStats{}
		for _, s := range r.Stats {
			out[s.Attributes.Id] = s
		}
		if len(out) != len(pods) {
			t.Fatalf("stats of %d pods, want %d", len(out), len(pods))
		}
		return out
	}
	t.Run("pods", func(t *testing.T) {
		got := podStats(t)
		for i, p := range pods {
			s := got[p.id]
			l := s.GetLinux()
			if len(l.GetContainers()) != len(p.containers) {
				t.Errorf("pod %d: %d containers, want %d", i, len(l.GetContainers()), len(p.containers))
			}
			var sum uint64
			for _, c := range l.GetContainers() {
				sum += c.GetCpu().GetUsageCoreNanoSeconds().GetValue()
			}
			// Both ways of counting hold the containers and the pause
			// process; the samples differ in time by at most a tick, so
			// only a lower bound is exact.
			if pod := l.GetCpu().GetUsageCoreNanoSeconds().GetValue(); pod < sum || pod == 0 {
				t.Errorf("pod %d: cpu %d, containers' sum %d", i, pod, sum)
			}
			if m := l.GetMemory(); m.GetWorkingSetBytes().GetValue() == 0 || m.GetRssBytes().GetValue() == 0 || m.GetTimestamp() == 0 {
				t.Errorf("pod %d: memory %v", i, m)
			}
			if l.GetProcess().GetProcessCount().GetValue() < uint64(len(p.containers)+1) {
				t.Errorf("pod %d: processes %v, want at least %d", i, l.GetProcess(), len(p.containers)+1)
			}
			n := l.GetNetwork()
			if n.GetDefaultInterface().GetName() != "eth0" || n.GetDefaultInterface().GetRxBytes() == nil || n.GetTimestamp() == 0 {
				t.Errorf("pod %d: network %v", i, n)
			}
		}
		one, err := sh.Runtime.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: pods[1].id})
		if err != nil {
			t.Fatal(err)
		}
		if one.Stats.GetAttributes().GetId() != pods[1].id || len(one.Stats.GetLinux().GetContainers()) != len(pods[1].containers) || one.Stats.GetLinux().GetCpu() == nil {
			t.Errorf("PodSandboxStats = %v", one.Stats)
		}
	})

	t.Run("pod cgroup outlives an exited container", func(t *testing.T) {
		if parent == "" {
			testenv.RequireOrSkip(t, "no pod cgroup on this Docker (its cgroup driver is not cgroupfs)")
		}
		p := pods[0]
		before := podStats(t)[p.id].GetLinux()
		// The busy container is the one that used most CPU: its exit would
		// show as a drop in a sum of the running containers.
		if _, err := sh.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: p.containers[0], Timeout: 1}); err != nil {
			t.Fatal(err)
		}
		after := podStats(t)[p.id].GetLinux()
		if b, a := before.GetCpu().GetUsageCoreNanoSeconds().GetValue(), after.GetCpu().GetUsageCoreNanoSeconds().GetValue(); a < b {
			t.Errorf("pod cpu went from %d to %d when a container exited", b, a)
		}
		for _, c := range after.GetContainers() {
			if c.Attributes.Id == p.containers[0] && (c.Cpu != nil || c.Memory != nil) {
				t.Errorf("exited container has a sample: %v %v", c.Cpu, c.Memory)
			}
		}
	})

	t.Run("single container", func(t *testing.T) {
		id := pods[1].containers[0]
		px.reset()
		r, err := sh.Runtime.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
		if err != nil {
			t.Fatal(err)
		}
		s := r.Stats
		if s.Attributes.GetId() != id || s.Attributes.GetMetadata().GetName() != "c0" || s.WritableLayer.GetUsedBytes().GetValue() < 2<<20 {
			t.Errorf("ContainerStats = %v", s)
		}
		// The sample is either fetched now or one of the last two seconds'
		// reused; either way it carries Docker's read time.
		if read := px.readTime(id); s.Cpu.GetTimestamp() != read.UnixNano() {
			t.Errorf("cpu timestamp %d, want Docker's read time %d", s.Cpu.GetTimestamp(), read.UnixNano())
		}
	})
}
