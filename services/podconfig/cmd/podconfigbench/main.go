// Command podconfigbench measures podconfig on this machine and prints a
// table: for each pod count, the time to load the manifest directory, the
// time from a manifest change to the update reaching a Watch client over the
// unix socket (p50/p99), the merge rate of full sets, and the memory used.
//
//	go run ./services/podconfig/cmd/podconfigbench -pods 1000,10000 -changes 100
//
// The service runs in this process (the same code the binary runs), so RSS
// includes the Watch client, which is small next to the pod cache.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/grpcserver"
	"github.com/microlet/microlet/internal/procinfo"
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/internal/socket"
	"github.com/microlet/microlet/services/podconfig/internal/manifest"
	"github.com/microlet/microlet/services/podconfig/internal/merge"
	"github.com/microlet/microlet/services/podconfig/internal/server"
)

func main() {
	podsFlag := flag.String("pods", "1000,10000", "comma-separated pod counts")
	changes := flag.Int("changes", 100, "manifest changes timed per pod count")
	flag.Parse()
	fmt.Printf("%-6s %8s %10s %10s %12s %12s %8s %8s\n", "pods", "load_s", "chg_p50ms", "chg_p99ms", "merges/s", "pods/s_chg", "rss_MiB", "peak_MiB")
	for _, f := range strings.Split(*podsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "bad -pods entry %q\n", f)
			os.Exit(2)
		}
		if err := run(n, *changes); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

func podYAML(i int, note string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: pod-%05d
  labels: {app: bench, idx: "%d"}
  annotations: {note: %q}
spec:
  containers:
  - name: app
    image: registry.local/app:1.0
    ports: [{containerPort: 8080}]
    resources: {limits: {cpu: 100m, memory: 64Mi}}
    readinessProbe: {httpGet: {port: 8080, path: /ready}}
  - name: sidecar
    image: registry.local/sidecar:1.0
`, i, i, note)
}

func run(n, changes int) error {
	runtime.GC()
	debug.FreeOSMemory()
	base, err := os.MkdirTemp("/tmp", "pcb")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(base) }()
	dir := filepath.Join(base, "m")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("pod-%05d.yaml", i)), []byte(podYAML(i, "0")), 0o644); err != nil {
			return err
		}
	}

	// The service, in process, on a real unix socket.
	s := server.New()
	cfg := s.Config().(*server.Config)
	cfg.NodeName = "bench"
	cfg.ManifestDir = dir
	cfg.FileCheckFrequency = time.Hour
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	env := &service.Env{Log: log, Registry: reg, Common: &cfg.Common, Server: grpcserver.New(log, grpcserver.WithRegistry(reg))}
	if err := s.Register(env); err != nil {
		return err
	}
	sock := filepath.Join(base, "pc.sock")
	lis, err := socket.Listen(sock)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = env.Server.Serve(lis) }()
	defer env.Server.Stop(time.Second)
	start := time.Now()
	go func() { _ = s.Run(ctx, env) }()

	cc, err := grpcclient.Dial(socket.Endpoint(sock))
	if err != nil {
		return err
	}
	defer func() { _ = cc.Close() }()
	client := podconfigv1.NewPodConfigServiceClient(cc)
	for {
		r, err := client.SourcesReady(ctx, &podconfigv1.SourcesReadyRequest{})
		if err == nil && len(r.GetSources()) == 1 && int(r.GetSources()[0].GetPods()) == n {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	load := time.Since(start)

	w, err := client.Watch(ctx, &podconfigv1.WatchRequest{})
	if err != nil {
		return err
	}
	if _, err := w.Recv(); err != nil { // the snapshot
		return err
	}
	lat := make([]time.Duration, 0, changes)
	for c := 1; c <= changes; c++ {
		i := (c * 7919) % n
		note := strconv.Itoa(c)
		t0 := time.Now()
		path := filepath.Join(dir, fmt.Sprintf("pod-%05d.yaml", i))
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(podYAML(i, note)), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
		if err := waitNote(w, note); err != nil {
			return err
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	rss, peak := memory()

	// Merge rate: full sets of n pods into a fresh storage, unchanged (the
	// periodic re-list) and with one changed pod each time (a file event).
	pods := make([]*corev1.Pod, n)
	for i := range n {
		p, err := manifest.ParsePod([]byte(podYAML(i, "0")), manifest.Source{NodeName: "bench", Location: fmt.Sprint(i), File: true})
		if err != nil {
			return err
		}
		pods[i] = p
	}
	st := merge.New()
	st.Merge("file", pods)
	rounds := max(3, 200000/n)
	t0 := time.Now()
	for range rounds {
		st.Merge("file", pods)
	}
	mergeRate := float64(rounds) / time.Since(t0).Seconds()
	t0 = time.Now()
	for r := range rounds {
		p := pods[r%n].DeepCopy()
		p.Labels["round"] = strconv.Itoa(r)
		pods[r%n] = p
		st.Merge("file", pods)
	}
	changeRate := float64(rounds*n) / time.Since(t0).Seconds()

	fmt.Printf("%-6d %8.2f %10.2f %10.2f %12.0f %12.0f %8.1f %8.1f\n", n, load.Seconds(),
		ms(lat[len(lat)/2]), ms(lat[min(len(lat)-1, len(lat)*99/100)]), mergeRate, changeRate, rss, peak)
	return nil
}

func waitNote(w podconfigv1.PodConfigService_WatchClient, note string) error {
	for {
		m, err := w.Recv()
		if err != nil {
			return err
		}
		for _, u := range m.GetUpdates() {
			if u.GetOp() != podconfigv1.Operation_OPERATION_ADD && u.GetOp() != podconfigv1.Operation_OPERATION_SET {
				continue
			}
			for _, b := range u.GetPods() {
				p := &corev1.Pod{}
				if err := p.Unmarshal(b); err != nil {
					return err
				}
				if p.Annotations["note"] == note {
					return nil
				}
			}
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// memory is this process's resident set and its peak, in MiB.
func memory() (rss, peak float64) {
	u, err := procinfo.Self()
	if err != nil {
		return 0, 0
	}
	return float64(u.RSS) / (1 << 20), float64(u.PeakRSS) / (1 << 20)
}
