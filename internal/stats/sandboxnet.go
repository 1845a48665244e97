package stats

import (
	"encoding/json"
	"maps"
	"slices"
	"sync"

	"github.com/prometheus/procfs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// pidCache remembers each sandbox's process ID, learnt once from the
// runtime's verbose PodSandboxStatus: a sandbox keeps its process for its
// whole life, and asking on every scrape would cost a CRI call per pod.
type pidCache struct {
	mu sync.Mutex
	m  map[string]int // 0: the runtime did not say
}

func newPIDCache() *pidCache { return &pidCache{m: map[string]int{}} }

// retain forgets sandboxes no longer listed.
func (c *pidCache) retain(live map[string]*runtimeapi.PodSandbox) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.m {
		if _, ok := live[id]; !ok {
			delete(c.m, id)
		}
	}
}

// retainIDs forgets the processes of IDs not in live.
func (c *pidCache) retainIDs(live map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.m {
		if !live[id] {
			delete(c.m, id)
		}
	}
}

// sandboxNetwork reads the pod's interfaces from its sandbox process's
// network namespace, as cAdvisor reads them for the kubelet, when the
// runtime's stats carry no network usage (runtime-shim's do not). nil when
// the sandbox's process is unknown or gone.
func (s *scrape) sandboxNetwork(sandboxID string) *statsv1alpha1.NetworkStats {
	pid := s.sandboxPID(sandboxID)
	if pid <= 0 {
		return nil
	}
	proc, err := procfs.NewFS(s.p.procRoot)
	if err != nil {
		return nil
	}
	pr, err := proc.Proc(pid)
	if err != nil {
		return nil
	}
	nd, err := pr.NetDev()
	if err != nil {
		s.p.log.Debug("pod network stats unavailable", "sandbox", sandboxID, "pid", pid, "err", err)
		return nil
	}
	return networkStats(nd, s.now)
}

func (s *scrape) sandboxPID(id string) int {
	return s.p.pids.get(s.p, id, func() (map[string]string, error) {
		resp, err := s.p.rt.PodSandboxStatus(s.ctx, id, true)
		return resp.GetInfo(), err
	})
}

// get returns the process of id, remembered, or learnt from the info of
// the runtime's verbose status; 0 when the runtime does not say. A failed
// status call is not remembered: the sandbox or container may be starting.
func (c *pidCache) get(p *Provider, id string, info func() (map[string]string, error)) int {
	c.mu.Lock()
	pid, ok := c.m[id]
	c.mu.Unlock()
	if ok {
		return pid
	}
	in, err := info()
	if err != nil {
		p.log.Debug("runtime status unavailable", "id", id, "err", err)
		return 0
	}
	pid = sandboxPIDFromInfo(in)
	c.mu.Lock()
	c.m[id] = pid
	c.mu.Unlock()
	return pid
}

// sandboxPIDFromInfo finds the sandbox process's ID in a verbose
// PodSandboxStatus's info: JSON objects with a "pid" member, which is how
// runtime-shim and containerd both report it (under the key "info").
func sandboxPIDFromInfo(info map[string]string) int {
	try := func(s string) int {
		var v struct {
			Pid int `json:"pid"`
		}
		if json.Unmarshal([]byte(s), &v) != nil || v.Pid < 0 {
			return 0
		}
		return v.Pid
	}
	if pid := try(info["info"]); pid > 0 {
		return pid
	}
	keys := slices.Sorted(maps.Keys(info))
	for _, k := range keys {
		if pid := try(info[k]); pid > 0 {
			return pid
		}
	}
	return 0
}
