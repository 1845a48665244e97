package server

import (
	"context"
	"fmt"
	"time"

	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/podsyncd/internal/podcgroups"
	"github.com/microlet/microlet/services/podsyncd/internal/syncloop"
)

// checkCgroups refuses bad pod cgroup settings, naming the field.
func (c *Config) checkCgroups() error {
	if c.CgroupDriver != podcgroups.DriverCgroupfs && c.CgroupDriver != podcgroups.DriverSystemd {
		return fmt.Errorf("cgroup_driver %q: want %s or %s", c.CgroupDriver, podcgroups.DriverCgroupfs, podcgroups.DriverSystemd)
	}
	if _, err := podcgroups.ParseCgroupfs(c.CgroupRoot); err != nil {
		return fmt.Errorf("cgroup_root: %w", err)
	}
	if _, err := podcgroups.NodeAllocatable(0, c.KubeReserved, c.SystemReserved); err != nil {
		return fmt.Errorf("kube_reserved/system_reserved: %w", err)
	}
	return nil
}

// runtimeCgroupDriver is the cgroup driver the runtime reports (the
// kubelet's KubeletCgroupDriverFromCRI), or fallback when it reports none.
func runtimeCgroupDriver(ctx context.Context, rt criapi.RuntimeService, fallback string) (string, bool) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := rt.RuntimeConfig(cctx)
	if err != nil || resp.GetLinux() == nil {
		return fallback, false
	}
	if resp.GetLinux().GetCgroupDriver() == runtimeapi.CgroupDriver_SYSTEMD {
		return podcgroups.DriverSystemd, true
	}
	return podcgroups.DriverCgroupfs, true
}

// podCgroups sets up the QoS hierarchy when cgroups_per_qos is on. A host
// where it cannot be made (no cgroupfs, not root) runs pods without pod
// cgroups, saying so.
func (s *Server) podCgroups(ctx context.Context, env *service.Env, rt criapi.RuntimeService, memCapacity int64) *podcgroups.Manager {
	c := &s.cfg
	if !c.CgroupsPerQOS {
		return nil
	}
	driver, reported := runtimeCgroupDriver(ctx, rt, c.CgroupDriver)
	alloc, err := podcgroups.NodeAllocatable(memCapacity, c.KubeReserved, c.SystemReserved)
	if err != nil { // checked in Register
		env.Log.Warn("pod cgroups off", "err", err)
		return nil
	}
	m, err := podcgroups.New(podcgroups.Config{
		Driver: driver, Root: c.CgroupRoot, PodPidsLimit: c.PodPidsLimit,
		NodeAllocatable: alloc, NoCPULimits: !c.CPUCFSQuota, Log: env.Log,
	})
	if err != nil {
		env.Log.Warn("pod cgroups off: the QoS cgroups cannot be made; pods run without pod-level limits", "cgroup_root", c.CgroupRoot, "cgroup_driver", driver, "err", err)
		return nil
	}
	env.Log.Info("pod cgroups on", "kubepods", m.NodeName(), "cgroup_driver", driver, "driver_from_runtime", reported)
	return m
}

// syncloopCgroups hands the manager to the loop (a nil manager stays a nil
// interface).
func syncloopCgroups(m *podcgroups.Manager) syncloop.PodCgroups {
	if m == nil {
		return nil
	}
	return m
}
