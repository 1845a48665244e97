// Command upstreambench runs the podconfigbench workload through upstream's
// own pkg/kubelet/config (NewSourceFile feeding NewPodConfig, read from
// Updates() in the same process) and prints the same columns, so the two
// can be set side by side:
//
//	cd services/podconfig/bench && go run ./cmd/upstreambench -pods 1000,10000 -changes 100
//
// Upstream has no socket in between; its latency is file change to the
// update on the in-process channel. Its merge is not callable from outside
// the package, so the merge columns are left empty.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/config"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
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

// podYAML is the same manifest podconfigbench writes.
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
	base, err := os.MkdirTemp("/tmp", "pcu")
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	pc := config.NewPodConfig(record.NewFakeRecorder(1<<16), nil)
	config.NewSourceFile(klog.Background(), dir, types.NodeName("bench"), time.Hour, pc.Channel(ctx, kubetypes.FileSource))
	seen := 0
	for seen < n {
		u := <-pc.Updates()
		if u.Op == kubetypes.ADD {
			seen += len(u.Pods)
		}
	}
	load := time.Since(start)

	lat := make([]time.Duration, 0, changes)
	for c := 1; c <= changes; c++ {
		i := (c * 7919) % n
		note := strconv.Itoa(c)
		t0 := time.Now()
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(podYAML(i, note)), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("pod-%05d.yaml", i))); err != nil {
			return err
		}
	wait:
		for {
			u := <-pc.Updates()
			if u.Op != kubetypes.ADD {
				continue
			}
			for _, p := range u.Pods {
				if p.Annotations["note"] == note {
					break wait
				}
			}
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	rss, peak := memory()
	fmt.Printf("%-6d %8.2f %10.2f %10.2f %12s %12s %8.1f %8.1f\n", n, load.Seconds(),
		ms(lat[len(lat)/2]), ms(lat[min(len(lat)-1, len(lat)*99/100)]), "-", "-", rss, peak)
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// memory is this process's resident set and its peak, in MiB.
func memory() (rss, peak float64) {
	self, err := procfs.Self()
	if err != nil {
		return 0, 0
	}
	st, err := self.NewStatus()
	if err != nil {
		return 0, 0
	}
	return float64(st.VmRSS) / (1 << 20), float64(st.VmHWM) / (1 << 20)
}
