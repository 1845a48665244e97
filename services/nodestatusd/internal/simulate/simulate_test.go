package simulate

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/config"
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/internal/service/servicetest"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	nodestatusv1 "github.com/microlet/microlet/proto/microlet/nodestatus/v1"
	"github.com/microlet/microlet/services/nodestatusd/internal/server"
	"github.com/microlet/microlet/services/nodestatusd/internal/simulate/simcri"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

// patience is how long the test waits for the agents; generous for a
// loaded 2-core machine.
const patience = 60 * time.Second

func TestBadConfigIsUsageError(t *testing.T) {
	dir := testenv.ShortDir(t, "nss")
	sock := filepath.Join(dir, "n.sock")
	kubeconfig := filepath.Join(dir, "kubeconfig") // never read: validation fails first
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nodes", "3"}, "kubeconfig"},
		{[]string{"--kubeconfig", kubeconfig, "--nodes", "0"}, "nodes"},
		{[]string{"--kubeconfig", kubeconfig, "--nodes", "-1"}, "nodes"},
		{[]string{"--kubeconfig", kubeconfig, "--prefix", "Bad_Prefix"}, "prefix"},
		{[]string{"--kubeconfig", kubeconfig, "--prefix", strings.Repeat("a", 252)}, "prefix"}, // a-0 is 254 long
		// nodestatusd's own settings are checked as in nodestatusd.
		{[]string{"--kubeconfig", kubeconfig, "--node-ip", "0.0.0.0"}, "node_ip"},
	} {
		t.Run(tc.want+"/"+strings.Join(tc.args, " "), func(t *testing.T) {
			args := append([]string{"--socket", sock, "--run-dir", dir}, tc.args...)
			s := New()
			err := config.Load(s.Name(), s.Config(), args)
			if err == nil {
				err = s.Config().CommonConfig().Complete(s.Name())
			}
			if err == nil {
				err = s.Register(&service.Env{}) // fails in validation, before Env is used
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q does not name %s on one line", err, tc.want)
			}
			if code := service.Execute(New(), args); code != 2 {
				t.Fatalf("exit code %d, want 2", code)
			}
			if _, err := os.Stat(sock); err == nil {
				t.Fatal("socket created despite a bad config")
			}
		})
	}
}

// TestSimulatedNodes runs five nodes against the API server: each is
// registered with its name, hostname and the prefix label, turns Ready,
// has a Lease, and is served by GetNode under its name.
func TestSimulatedNodes(t *testing.T) {
	cp := controlplane.Get(t)
	ctx := context.Background()
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir := testenv.ShortDir(t, "nss")
	servicetest.Serve(t, filepath.Join(dir, "runtime.sock"), simcri.Register)
	const n, prefix = 5, "nss-sim"
	s := New()
	s.cfg.RunDir = dir
	s.cfg.Kubeconfig = cp.AdminKubeconfig()
	s.cfg.Socket = filepath.Join(dir, "nodestatusd.sock")
	s.cfg.NodeName = "unused"
	s.cfg.NodeStatusUpdateFrequency = time.Second
	s.cfg.Nodes = n
	s.cfg.Prefix = prefix
	running := servicetest.Start(t, s, s.cfg.Socket, servicetest.WithLogLevel(slog.LevelWarn))
	client := nodestatusv1.NewNodeStatusServiceClient(running.Dial(t))

	for i := range n {
		name := Name(prefix, i)
		testenv.Eventually(t, name+" registered, Ready, leased", patience, func() error {
			node, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			ready := false
			for _, c := range node.Status.Conditions {
				ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
			}
			if !ready {
				return fmt.Errorf("not Ready: %+v", node.Status.Conditions)
			}
			if node.Labels[LabelPrefix] != prefix || node.Labels[corev1.LabelHostname] != name {
				return fmt.Errorf("labels %v", node.Labels)
			}
			_, err = admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
			return err
		})
	}
	if _, err := admin.CoreV1().Nodes().Get(ctx, "unused", metav1.GetOptions{}); err == nil {
		t.Fatal("node_name registered: the simulation keeps only its own nodes")
	}
	resp, err := client.GetNode(ctx, &nodestatusv1.GetNodeRequest{NodeName: Name(prefix, 3)})
	if err != nil {
		t.Fatal(err)
	}
	node, err := server.NodeFromBytes(resp.GetNode())
	if err != nil {
		t.Fatal(err)
	}
	if node.Name != Name(prefix, 3) {
		t.Fatalf("GetNode(%s) = %s", Name(prefix, 3), node.Name)
	}
}
