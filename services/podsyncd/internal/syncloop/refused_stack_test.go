package syncloop

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
)

// stackCounts are the counters TestOversizeStatusOnTheRealStack reads.
type stackCounts struct {
	setCalls, setRefused float64 // statusd's SetPodStatus calls, and those answered InvalidArgument
	statusdTooLarge      float64 // statusd_status_too_large_total
	patches              float64 // the API server's PATCHes of pods/status, whatever their answer
	podsyncdRefused      float64 // microlet_podsyncd_status_refused_total
}

func (c stackCounts) minus(o stackCounts) stackCounts {
	return stackCounts{c.setCalls - o.setCalls, c.setRefused - o.setRefused, c.statusdTooLarge - o.statusdTooLarge, c.patches - o.patches, c.podsyncdRefused - o.podsyncdRefused}
}

// TestOversizeStatusOnTheRealStack: the real statusd binary, connected to
// a real API server, with podsyncd's status reports (Loop.report) sending
// it one pod's statuses once every sync period, 20 syncs over 4 seconds
// (four of statusd's reconcile periods). Counted, not timed:
//   - a status over statusd's limit costs one statusd call (InvalidArgument
//     naming the size and the limit) and no API request;
//   - a status statusd takes but the API server refuses as too large costs
//     one PATCH, and podsyncd's next report of it is refused
//     (InvalidArgument), after which nothing is sent anywhere;
//   - a smaller status after that reaches the API.
func TestOversizeStatusOnTheRealStack(t *testing.T) {
	cp := controlplane.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	suffix := rand.String(5)
	node, ns := "oversize-"+suffix, "ns-"+suffix
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(cp.NodeConfig(node)).CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// statusd takes up to 3 MiB here, more than the API server stores
	// (etcd's 1.5 MiB request limit), so both refusals can be shown.
	const statusdLimit = 3 << 20
	dir := testenv.ShortDir(t, "ovs")
	bin := filepath.Join(testenv.Build(t, nil, "github.com/microlet/microlet/services/statusd"), "statusd")
	sd := testenv.StartProcess(t, "statusd", bin, "--run-dir", dir, "--data-dir", filepath.Join(dir, "data"),
		"--node-name", node, "--kubeconfig", cp.NodeKubeconfig(node), "--mirror-pods=false", "--reconcile-period", "1s",
		"--metrics-addr", "127.0.0.1:0", "--max-status-bytes", strconv.Itoa(statusdLimit))
	cc, err := grpcclient.Dial("unix://" + filepath.Join(dir, "statusd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	sc := statusdv1.NewStatusServiceClient(cc)
	testenv.Eventually(t, "statusd serving", time.Minute, func() error {
		_, err := sc.ListPodStatuses(ctx, &statusdv1.ListPodStatusesRequest{})
		return err
	})

	var out logLines
	reg := prometheus.NewRegistry()
	rt := &flakyRuntime{}
	rm := podruntime.NewManager(rt, rt, podruntime.Options{LogRoot: t.TempDir(), Log: out.logger()})
	l := New(out.logger(), rm, rt, nil, sc, nil, Options{Registerer: reg})

	counts := func() stackCounts {
		t.Helper()
		var c stackCounts
		testenv.Eventually(t, "counters read", time.Minute, func() error {
			sm, err := scrapeLogged(ctx, sd)
			if err != nil {
				return err
			}
			body, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
			if err != nil {
				return err
			}
			am, err := testenv.ParseMetrics(body)
			if err != nil {
				return err
			}
			pm, err := testenv.GatherMetrics(reg)
			if err != nil {
				return err
			}
			set := map[string]string{"grpc_method": "SetPodStatus"}
			c.setCalls = sm.Sum("grpc_server_handled_total", set)
			set["grpc_code"] = "InvalidArgument"
			c.setRefused = sm.Sum("grpc_server_handled_total", set)
			c.statusdTooLarge = sm.Sum("statusd_status_too_large_total", nil)
			c.patches = am.Sum("apiserver_request_total", map[string]string{"verb": "PATCH", "resource": "pods", "subresource": "status"})
			c.podsyncdRefused = pm.Sum("microlet_podsyncd_status_refused_total", nil)
			return nil
		})
		return c
	}
	syncs := func(st *corev1.PodStatus) {
		for range 20 {
			l.report(ctx, pod, st)
			time.Sleep(200 * time.Millisecond)
		}
	}
	sized := func(n int) *corev1.PodStatus {
		return &corev1.PodStatus{Phase: corev1.PodRunning, Message: strings.Repeat("x", n)}
	}
	check := func(what string, got, want stackCounts) {
		t.Helper()
		t.Logf("%s: %+v", what, got)
		if got != want {
			t.Fatalf("%s: counted %+v, want %+v", what, got, want)
		}
	}

	// Over statusd's limit.
	start := counts()
	syncs(sized(statusdLimit + 1<<20))
	check("over statusd's limit, 20 syncs", counts().minus(start), stackCounts{setCalls: 1, setRefused: 1, podsyncdRefused: 1})
	if s := out.String(); !strings.Contains(s, "over statusd's limit") || !strings.Contains(s, "pod="+ns+"/big") {
		t.Fatalf("podsyncd's log does not name the pod and statusd's limit:\n%s", s)
	}

	// Taken by statusd, refused by the API server: the first report is
	// taken, the syncer's PATCH refused; once statusd counts that, the
	// next report is refused and the rest are held back.
	start = counts()
	big := sized(2 << 20)
	l.report(ctx, pod, big)
	testenv.Eventually(t, "statusd counting the API server's refusal", time.Minute, func() error {
		if n := counts().minus(start).statusdTooLarge; n != 1 {
			return fmt.Errorf("statusd_status_too_large_total went up by %v", n)
		}
		return nil
	})
	syncs(big)
	check("refused by the API server, 21 syncs", counts().minus(start), stackCounts{setCalls: 2, setRefused: 1, statusdTooLarge: 1, patches: 1, podsyncdRefused: 1})

	// A status the API server stores.
	l.report(ctx, pod, &corev1.PodStatus{Phase: corev1.PodRunning, Message: "small again"})
	testenv.Eventually(t, "the small status in the API", time.Minute, func() error {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "big", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Message != "small again" {
			return errors.New("not there yet")
		}
		return nil
	})
}

// scrapeLogged scrapes the /metrics of a process started with
// --metrics-addr 127.0.0.1:0, at the address it logged.
func scrapeLogged(ctx context.Context, p *testenv.Process) (testenv.Metrics, error) {
	_, rest, ok := strings.Cut(p.Out.String(), "setting=metrics_addr addr=")
	if !ok {
		return nil, errors.New("no metrics address logged yet")
	}
	addr, _, _ := strings.Cut(rest, "\n")
	return testenv.ScrapeMetrics(ctx, "http://"+strings.Fields(addr)[0]+"/metrics")
}
