package bench

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv/registry"
	"github.com/microlet/microlet/services/runtime-shim/internal/docker"
	"github.com/microlet/microlet/services/runtime-shim/internal/shimtest"
)

func TestMain(m *testing.M) { os.Exit(shimtest.Main(m)) }

// samples per operation; p99 of 30 samples is close to the maximum, which
// is what a table from a shared 2-core machine can honestly show.
const samples = 30

// pods is how many one-container pods the start-up measurement starts.
const pods = 30

type series map[string][]time.Duration

func (s series) add(op string, d time.Duration) { s[op] = append(s[op], d) }

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	c := append([]time.Duration(nil), ds...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	i := int(p*float64(len(c))+0.5) - 1
	return c[max(0, min(i, len(c)-1))]
}

func timed(s series, op string, f func() error) error {
	start := time.Now()
	err := f()
	s.add(op, time.Since(start))
	return err
}

func sandboxConfig(n int, tag string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: fmt.Sprintf("bench-%s-%d", tag, n), Namespace: "bench", Uid: fmt.Sprintf("bench-%s-%d-%d", tag, n, time.Now().UnixNano())},
		Linux:    &runtimeapi.LinuxPodSandboxConfig{},
	}
}

// shimOps runs one pod through the shim, timing each call.
func shimOps(ctx context.Context, sh *shimtest.Shim, image string, n int, s series) (string, error) {
	pc := sandboxConfig(n, "shim")
	var sb *runtimeapi.RunPodSandboxResponse
	if err := timed(s, "RunPodSandbox", func() (err error) {
		sb, err = sh.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})
		return err
	}); err != nil {
		return "", err
	}
	var c *runtimeapi.CreateContainerResponse
	if err := timed(s, "CreateContainer", func() (err error) {
		c, err = sh.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: pc,
			Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: image}, Command: []string{"sleep", "3600"}}})
		return err
	}); err != nil {
		return sb.PodSandboxId, err
	}
	if err := timed(s, "StartContainer", func() error {
		_, err := sh.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})
		return err
	}); err != nil {
		return sb.PodSandboxId, err
	}
	if err := timed(s, "ContainerStatus", func() error {
		_, err := sh.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.ContainerId})
		return err
	}); err != nil {
		return sb.PodSandboxId, err
	}
	return sb.PodSandboxId, timed(s, "ListContainers", func() error {
		_, err := sh.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		return err
	})
}

// dockerOps does the same Docker work directly: a pause container created
// and started, a container joining its namespaces, inspect and list.
func dockerOps(ctx context.Context, env *shimtest.Env, image string, n int, s series) error {
	dc := env.Docker
	labels := map[string]string{docker.LabelInstance: env.Instance, "bench": "direct"}
	var pause client.ContainerCreateResult
	if err := timed(s, "RunPodSandbox", func() (err error) {
		pause, err = dc.ContainerCreate(ctx, client.ContainerCreateOptions{Name: fmt.Sprintf("bench-direct-pause-%s-%d", env.Instance, n),
			Config: &container.Config{Image: env.PauseImage(), Labels: labels}, HostConfig: &container.HostConfig{IpcMode: "shareable"}})
		if err != nil {
			return err
		}
		_, err = dc.ContainerStart(ctx, pause.ID, client.ContainerStartOptions{})
		return err
	}); err != nil {
		return err
	}
	var c client.ContainerCreateResult
	if err := timed(s, "CreateContainer", func() (err error) {
		ns := "container:" + pause.ID
		c, err = dc.ContainerCreate(ctx, client.ContainerCreateOptions{Name: fmt.Sprintf("bench-direct-c-%s-%d", env.Instance, n),
			Config:     &container.Config{Image: image, Cmd: []string{"sleep", "3600"}, Labels: labels},
			HostConfig: &container.HostConfig{NetworkMode: container.NetworkMode(ns), IpcMode: container.IpcMode(ns), PidMode: container.PidMode(ns)}})
		return err
	}); err != nil {
		return err
	}
	if err := timed(s, "StartContainer", func() error {
		_, err := dc.ContainerStart(ctx, c.ID, client.ContainerStartOptions{})
		return err
	}); err != nil {
		return err
	}
	if err := timed(s, "ContainerStatus", func() error {
		_, err := dc.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
		return err
	}); err != nil {
		return err
	}
	return timed(s, "ListContainers", func() error {
		f := client.Filters{}
		f.Add("label", docker.LabelInstance+"="+env.Instance)
		_, err := dc.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
		return err
	})
}

func removeDirect(ctx context.Context, env *shimtest.Env) {
	f := client.Filters{}
	f.Add("label", "bench=direct")
	f.Add("label", docker.LabelInstance+"="+env.Instance)
	res, err := env.Docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return
	}
	for _, c := range res.Items {
		_, _ = env.Docker.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
	}
}

func removeShimPods(ctx context.Context, sh *shimtest.Shim, ids []string) {
	for _, id := range ids {
		_, _ = sh.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
		_, _ = sh.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
	}
}

// startPods starts n one-container pods, 5 at a time, and returns the wall time.
func startPods(n int, one func(i int) error) (time.Duration, error) {
	start := time.Now()
	sem := make(chan struct{}, 5)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := one(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	return time.Since(start), first
}

// BenchmarkShimVsDocker prints the latency table; run it with -benchtime 1x
// (each run already takes samples of every operation).
func BenchmarkShimVsDocker(b *testing.B) {
	env := shimtest.Get(b)
	sh := env.StartShim(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	image := env.Registry.Image(registry.Busybox)
	if _, err := sh.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		shimS, dockerS := series{}, series{}
		var ids []string
		for n := 0; n < samples; n++ {
			id, err := shimOps(ctx, sh, image, n, shimS)
			if id != "" {
				ids = append(ids, id)
			}
			if err != nil {
				removeShimPods(ctx, sh, ids)
				b.Fatal(err)
			}
			if err := dockerOps(ctx, env, image, n, dockerS); err != nil {
				removeDirect(ctx, env)
				b.Fatal(err)
			}
		}
		removeShimPods(ctx, sh, ids)
		removeDirect(ctx, env)

		var podIDs []string
		var idMu sync.Mutex
		shimWall, err := startPods(pods, func(i int) error {
			id, err := shimOps(ctx, sh, image, 1000+i, series{})
			idMu.Lock()
			podIDs = append(podIDs, id)
			idMu.Unlock()
			return err
		})
		removeShimPods(ctx, sh, podIDs)
		if err != nil {
			b.Fatal(err)
		}
		dockerWall, err := startPods(pods, func(i int) error { return dockerOps(ctx, env, image, 1000+i, series{}) })
		removeDirect(ctx, env)
		if err != nil {
			b.Fatal(err)
		}

		var sb strings.Builder
		fmt.Fprintf(&sb, "\n%-16s %12s %12s %12s %12s %8s %8s\n", "operation", "shim p50", "shim p99", "docker p50", "docker p99", "p50 x", "p99 x")
		for _, op := range []string{"RunPodSandbox", "CreateContainer", "StartContainer", "ContainerStatus", "ListContainers"} {
			sp50, sp99 := pct(shimS[op], 0.50), pct(shimS[op], 0.99)
			dp50, dp99 := pct(dockerS[op], 0.50), pct(dockerS[op], 0.99)
			fmt.Fprintf(&sb, "%-16s %12s %12s %12s %12s %8.2f %8.2f\n", op, round(sp50), round(sp99), round(dp50), round(dp99),
				float64(sp50)/float64(dp50), float64(sp99)/float64(dp99))
		}
		fmt.Fprintf(&sb, "%d one-container pods, 5 at a time: shim %s, docker direct %s (x%.2f)\n", pods, round(shimWall), round(dockerWall), float64(shimWall)/float64(dockerWall))
		fmt.Print(sb.String())
		b.ReportMetric(float64(shimWall.Milliseconds()), "ms/30pods")
	}
}

func round(d time.Duration) time.Duration {
	switch {
	case d > 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
