package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/services/runtime-shim/internal/shimtest"
)

// statsRounds is how many scrapes of each kind the benchmark times.
const statsRounds = 3

// BenchmarkStats prints how long a stats scrape takes through the shim
// with N running containers (pods of 3), next to Docker's own floor: the
// containers' one-shot stats asked one after another (what the shim did
// before) and all at once. "cold" scrapes come 2.5 s after the previous
// one, so no sample the shim may keep is young enough to reuse; "warm"
// ones follow straight after another scrape. It also times what the
// writable layers' and the image store's usage cost Docker: inspect with
// size=1 of every container, one after another, and /system/df. Run with
// -benchtime 1x:
//
//	MICROLET_REQUIRE_CONTROLPLANE=1 go test -run '^$' -bench Stats -benchtime 1x ./services/runtime-shim/internal/server/
func BenchmarkStats(b *testing.B) {
	env := shimtest.Get(b)
	sh := env.StartShim(b)
	for _, n := range []int{6, 24} {
		b.Run(fmt.Sprintf("containers=%d", n), func(b *testing.B) {
			tag := fmt.Sprintf("bench%d-%d", n, time.Now().UnixNano()%1e6)
			pods := runStatsPods(b, env, sh, tag, n/3, 3, nil, nil)
			var ids []string
			for _, p := range pods {
				ids = append(ids, p.containers...)
			}
			for range b.N {
				benchStats(b, env, sh, tag, ids)
			}
		})
	}
}

func benchStats(b *testing.B, env *shimtest.Env, sh *shimtest.Shim, tag string, ids []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cf := &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"stats-test": tag}}}
	pf := &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{LabelSelector: map[string]string{"stats": tag}}}
	ops := []struct {
		name string
		cold bool
		f    func() error
	}{
		{"ListContainerStats cold", true, func() error {
			r, err := sh.Runtime.ListContainerStats(ctx, cf)
			if err == nil && len(r.Stats) != len(ids) {
				err = fmt.Errorf("%d stats for %d containers", len(r.Stats), len(ids))
			}
			return err
		}},
		{"ListContainerStats warm", false, func() error {
			_, err := sh.Runtime.ListContainerStats(ctx, cf)
			return err
		}},
		{"ListPodSandboxStats cold", true, func() error {
			_, err := sh.Runtime.ListPodSandboxStats(ctx, pf)
			return err
		}},
		{"ListPodSandboxStats warm", false, func() error {
			_, err := sh.Runtime.ListPodSandboxStats(ctx, pf)
			return err
		}},
		{"ContainerStats cold", true, func() error {
			_, err := sh.Runtime.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: ids[0]})
			return err
		}},
		{"docker one by one", true, func() error {
			for _, id := range ids {
				if err := dockerOneShot(ctx, env.Docker, id); err != nil {
					return err
				}
			}
			return nil
		}},
		{"docker inspect size=1 each", false, func() error {
			for _, id := range ids {
				if _, err := env.Docker.ContainerInspect(ctx, id, client.ContainerInspectOptions{Size: true}); err != nil {
					return err
				}
			}
			return nil
		}},
		{"docker system df", false, func() error {
			_, err := env.Docker.DiskUsage(ctx, client.DiskUsageOptions{})
			return err
		}},
		{"docker all at once", true, func() error {
			errs := make([]error, len(ids))
			var wg sync.WaitGroup
			for i, id := range ids {
				wg.Go(func() { errs[i] = dockerOneShot(ctx, env.Docker, id) })
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					return err
				}
			}
			return nil
		}},
	}
	var sb strings.Builder
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&sb, "\n%d containers in %d pods; load average %s", len(ids), len(ids)/3, load)
	fmt.Fprintf(&sb, "%-26s %10s %10s %10s\n", "operation", "min", "p50", "max")
	for _, op := range ops {
		var ds []time.Duration
		for range statsRounds {
			if op.cold {
				time.Sleep(2500 * time.Millisecond)
			}
			start := time.Now()
			if err := op.f(); err != nil {
				b.Fatalf("%s: %v", op.name, err)
			}
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		fmt.Fprintf(&sb, "%-26s %10s %10s %10s\n", op.name, roundMs(ds[0]), roundMs(ds[len(ds)/2]), roundMs(ds[len(ds)-1]))
	}
	fmt.Print(sb.String())
}

// dockerOneShot is one stats call as the shim made it before: stream=false
// with one-shot, read to the end.
func dockerOneShot(ctx context.Context, cli *client.Client, id string) error {
	res, err := cli.ContainerStats(ctx, id, client.ContainerStatsOptions{})
	if err != nil {
		return err
	}
	defer res.Body.Close()
	var s container.StatsResponse
	return json.NewDecoder(res.Body).Decode(&s)
}

func roundMs(d time.Duration) time.Duration {
	if d > 10*time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(10 * time.Microsecond)
}
