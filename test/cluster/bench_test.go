package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/test/cluster/dockerimage"
)

// tcpbenchImage holds cmd/tcpbench alone.
const tcpbenchImage = "microlet.local/tcpbench:1"

// tcpbenchResult is what `tcpbench client` prints.
type tcpbenchResult struct {
	MBPerSec  float64 `json:"mb_per_s"`
	RTTP50us  float64 `json:"rtt_p50_us"`
	RTTP99us  float64 `json:"rtt_p99_us"`
	RTTMeanus float64 `json:"rtt_mean_us"`
}

// BenchmarkClusterPodNetwork measures TCP between pods of a make cluster
// cluster (containerd, microlet, podnet): throughput of a 256 MiB stream
// and one-byte round trips, from a pod on the server pod's own node
// (bridge only) and from a pod on the other worker (bridge, the node's
// route over the cluster's Docker network, the other node's bridge). It
// reuses a healthy cluster named mlbench, else makes one, and removes it
// at the end unless MICROLET_CLUSTER_KEEP is set.
//
//	go test -run '^$' -bench ClusterPodNetwork -benchtime 1x ./test/cluster
func BenchmarkClusterPodNetwork(b *testing.B) {
	testenv.RequireRoot(b, "the cluster's node containers")
	if _, err := exec.LookPath("docker"); err != nil {
		testenv.RequireOrSkip(b, "no docker: %v", err)
	}
	if _, err := controlplane.FindKubectl(); err != nil {
		testenv.RequireOrSkip(b, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cfg := Config{Name: "mlbench", Workers: 2, Log: testWriter{b}}
	b.Cleanup(func() {
		if os.Getenv("MICROLET_CLUSTER_KEEP") == "" {
			if err := Down(context.Background(), cfg); err != nil {
				b.Errorf("down: %v", err)
			}
		}
	})
	cl, err := Up(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	// netgo, osusergo: a static binary (the image holds nothing else).
	dir := testenv.Build(b, []string{"-tags=netgo,osusergo"}, "github.com/microlet/microlet/test/cluster/cmd/tcpbench")
	if _, err := dockerimage.Import(ctx, dockerimage.Spec{
		Name: tcpbenchImage, Files: map[string]string{"tcpbench": filepath.Join(dir, "tcpbench")},
		Changes: []string{`ENTRYPOINT ["/tcpbench"]`, `CMD ["server"]`},
	}, testWriter{b}); err != nil {
		b.Fatal(err)
	}
	if err := Load(ctx, cl.Config, tcpbenchImage); err != nil {
		b.Fatal(err)
	}
	cs, err := cl.Client()
	if err != nil {
		b.Fatal(err)
	}
	a, other := cl.Nodes[1].Name, cl.Nodes[2].Name
	ns := "tcpbench"
	_ = cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	waitGone(ctx, b, cs, ns)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	pods := map[string]string{"server": a, "same-node": a, "cross-node": other}
	for name, node := range pods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
				Name: "tcpbench", Image: tcpbenchImage, ImagePullPolicy: corev1.PullNever,
			}}},
		}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	serverIP := ""
	for name := range pods {
		p := waitRunning(ctx, b, cs, ns, name)
		if name == "server" {
			serverIP = p.Status.PodIP
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, from := range []string{"same-node", "cross-node"} {
			out, err := cl.Kubectl(ctx, nil, "exec", "-n", ns, from, "--", "/tcpbench", "client", "-addr", serverIP+":5201")
			if err != nil {
				b.Fatal(err)
			}
			var r tcpbenchResult
			if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
				b.Fatalf("%s: %v: %s", from, err, out)
			}
			b.ReportMetric(r.MBPerSec, from+"-MB/s")
			b.ReportMetric(r.RTTP50us, from+"-rtt-p50-us")
			b.ReportMetric(r.RTTP99us, from+"-rtt-p99-us")
			fmt.Printf("%s -> server on %s: %.0f MB/s, round trip p50 %.0f µs, p99 %.0f µs, mean %.0f µs\n", from, a, r.MBPerSec, r.RTTP50us, r.RTTP99us, r.RTTMeanus)
		}
	}
}

func waitRunning(ctx context.Context, b *testing.B, cs kubernetes.Interface, ns, name string) *corev1.Pod {
	b.Helper()
	for {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			return p
		}
		select {
		case <-ctx.Done():
			b.Fatalf("pod %s/%s not running: %v (%v)", ns, name, ctx.Err(), err)
		case <-time.After(time.Second):
		}
	}
}

func waitGone(ctx context.Context, b *testing.B, cs kubernetes.Interface, ns string) {
	b.Helper()
	for {
		if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatalf("namespace %s still there: %v", ns, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}
