package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/internal/config"
	"github.com/microlet/microlet/internal/service"
	nodestatusv1 "github.com/microlet/microlet/proto/microlet/nodestatus/v1"
)

func TestBadConfigIsOneLineUsageError(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "nsd")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	sock := filepath.Join(dir, "n.sock")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node-name", "Bad_Name"}, "node_name"},
		{[]string{"--node-name", "ok", "--node-labels", "kubernetes.io/role=x"}, "node_labels"},
		{[]string{"--node-name", "ok", "--node-labels", "a b=c"}, "node_labels"},
		{[]string{"--node-name", "ok", "--register-with-taints", "k=v:Sometimes"}, "register_with_taints"},
		{[]string{"--node-name", "ok", "--register-with-taints", "no-effect"}, "register_with_taints"},
		{[]string{"--node-name", "ok", "--eviction-hard", "memory.free=1Mi"}, "eviction_hard"},
		{[]string{"--node-name", "ok", "--node-ip", "300.1.1.1"}, "node_ip"},
		{[]string{"--node-name", "ok", "--node-ip", "10.0.0.1,10.0.0.2"}, "node_ip"}, // two IPv4: refused as upstream
		{[]string{"--node-name", "ok", "--node-ip", "10.0.0.1,fd00::1,fd00::2"}, "node_ip"},
		{[]string{"--node-name", "ok", "--node-ip", "0.0.0.0"}, "node_ip"},
	} {
		t.Run(tc.want+"/"+strings.Join(tc.args, " "), func(t *testing.T) {
			s := New()
			args := append([]string{"--socket", sock, "--run-dir", dir}, tc.args...)
			if err := loadAndRegister(s, args); err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
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

// loadAndRegister is what service.Execute does before listening.
func loadAndRegister(s *Server, args []string) error {
	if err := config.Load(s.Name(), s.Config(), args); err != nil {
		return err
	}
	if err := s.cfg.Complete(s.Name()); err != nil {
		return err
	}
	return s.validate()
}

func TestStandaloneServesComputedNode(t *testing.T) {
	r := startRig(t, rigOpts{node: "standalone-1", noCloud: true})
	n := r.getNode("")
	if n.Name != "standalone-1" || n.Labels[corev1.LabelHostname] != "standalone-1" {
		t.Fatalf("node %s labels %v", n.Name, n.Labels)
	}
	if c := condition(n, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
		t.Fatalf("Ready = %+v", c)
	}
	if n.Status.NodeInfo.ContainerRuntimeVersion != "fakecri://0.1" || len(n.Status.Images) != 1 || n.Status.Capacity.Pods().Value() != 110 {
		t.Fatalf("status %+v", n.Status)
	}

	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	w, err := r.client.WatchNode(ctx, &nodestatusv1.WatchNodeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	// A reported condition shows up in the watch; a bad one is refused.
	c := corev1.NodeCondition{Type: "FrobnicatorHealthy", Status: corev1.ConditionTrue, Reason: "Fine"}
	b, _ := c.Marshal()
	if _, err := r.client.ReportNodeConditions(ctx, &nodestatusv1.ReportNodeConditionsRequest{Reporter: "frob", Conditions: [][]byte{b}}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		n, err := NodeFromBytes(resp.GetNode())
		if err != nil {
			t.Fatal(err)
		}
		if c := condition(n, "FrobnicatorHealthy"); c != nil && c.Status == corev1.ConditionTrue {
			break
		}
	}
	bad := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse}
	b, _ = bad.Marshal()
	_, err = r.client.ReportNodeConditions(ctx, &nodestatusv1.ReportNodeConditionsRequest{Reporter: "evil", Conditions: [][]byte{b}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "conditions[0].type") {
		t.Fatalf("reporting Ready: %v", err)
	}
	_, err = r.client.ReportNodeConditions(ctx, &nodestatusv1.ReportNodeConditionsRequest{Reporter: "x", Conditions: [][]byte{{0xff, 0xff}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("garbage condition: %v", err)
	}
	if _, err := r.client.GetNode(ctx, &nodestatusv1.GetNodeRequest{NodeName: "other"}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetNode(other): %v", err)
	}
}

func TestStandaloneWithoutCRIIsNotReadyNamingTheSocket(t *testing.T) {
	r := startRig(t, rigOpts{node: "standalone-2", noCRI: true, noCloud: true})
	n := r.getNode("")
	sock := filepath.Join(r.dir, "runtime.sock")
	c := condition(n, corev1.NodeReady)
	if c == nil || c.Status != corev1.ConditionFalse || !strings.Contains(c.Message, sock) {
		t.Fatalf("Ready = %+v, want False naming %s", c, sock)
	}
}
