package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv/cninet"
	"github.com/microlet/microlet/services/runtime-shim/internal/shimtest"
)

// rounds of the network comparison; the modes take turns, so load from
// elsewhere on the machine falls on both.
const rounds = 2

type modeResult struct {
	run, stop           []time.Duration // RunPodSandbox, StopPodSandbox+RemovePodSandbox per pod
	startWall, downWall []time.Duration // per round: 30 pods up, 30 pods down
}

// sandboxRound starts pods sandboxes 5 at a time, then stops and removes
// them 5 at a time, timing each call and both walls.
func sandboxRound(ctx context.Context, sh *shimtest.Shim, tag string, res *modeResult) ([]string, error) {
	var mu sync.Mutex
	ids := make([]string, pods)
	wall, err := startPods(pods, func(i int) error {
		pc := sandboxConfig(i, tag)
		pc.Hostname = fmt.Sprintf("bench-%d", i)
		start := time.Now()
		sb, err := sh.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})
		d := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		res.run = append(res.run, d)
		if sb != nil {
			ids[i] = sb.PodSandboxId
		}
		return err
	})
	res.startWall = append(res.startWall, wall)
	if err != nil {
		return ids, err
	}
	wall, err = startPods(pods, func(i int) error {
		start := time.Now()
		if _, err := sh.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: ids[i]}); err != nil {
			return err
		}
		_, err := sh.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: ids[i]})
		mu.Lock()
		res.stop = append(res.stop, time.Since(start))
		mu.Unlock()
		return err
	})
	res.downWall = append(res.downWall, wall)
	return ids, err
}

// BenchmarkCNIvsDockerBridge prints sandbox start p50/p99 in the cni
// network mode (the reference bridge, host-local, portmap, firewall and
// loopback plugins) against Docker's bridge, 30 sandboxes 5 at a time,
// and the time to tear the 30 down. Run with -benchtime 1x.
func BenchmarkCNIvsDockerBridge(b *testing.B) {
	env := shimtest.Get(b)
	n := cninet.New(b)
	n.Install(b, "10-bench.conflist", n.Conflist())
	dockerShim := env.StartShim(b)
	cniShim := env.StartShim(b, n.ShimArgs()...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	for i := 0; i < b.N; i++ {
		modes := map[string]*modeResult{"docker": {}, "cni": {}}
		for r := 0; r < rounds; r++ {
			for _, m := range []string{"docker", "cni"} {
				sh := dockerShim
				if m == "cni" {
					sh = cniShim
				}
				ids, err := sandboxRound(ctx, sh, fmt.Sprintf("%s%d", m, r), modes[m])
				if err != nil {
					removeShimPods(ctx, sh, ids)
					b.Fatalf("%s round %d: %v", m, r, err)
				}
				if m == "cni" {
					if held := cninet.Allocated(b, n.IPAMDir, n.Name); len(held) != 0 {
						b.Fatalf("host-local still holds %d addresses after the teardown", len(held))
					}
				}
			}
		}
		d, c := modes["docker"], modes["cni"]
		var sb strings.Builder
		fmt.Fprintf(&sb, "\n%d sandboxes, 5 at a time, %d rounds per mode\n", pods, rounds)
		fmt.Fprintf(&sb, "%-28s %12s %12s %8s\n", "", "docker", "cni", "cni/docker")
		row := func(name string, dv, cv time.Duration) {
			fmt.Fprintf(&sb, "%-28s %12s %12s %8.2f\n", name, round(dv), round(cv), float64(cv)/float64(dv))
		}
		row("RunPodSandbox p50", pct(d.run, 0.50), pct(c.run, 0.50))
		row("RunPodSandbox p99", pct(d.run, 0.99), pct(c.run, 0.99))
		row("stop+remove p50", pct(d.stop, 0.50), pct(c.stop, 0.50))
		row("stop+remove p99", pct(d.stop, 0.99), pct(c.stop, 0.99))
		row("30 sandboxes up (best round)", slices.Min(d.startWall), slices.Min(c.startWall))
		row("30 sandboxes down (best round)", slices.Min(d.downWall), slices.Min(c.downWall))
		fmt.Print(sb.String())
		b.ReportMetric(float64(pct(c.run, 0.50))/float64(pct(d.run, 0.50)), "cni/docker-p50")
	}
}
