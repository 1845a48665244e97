package cloud

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/services/cloudsyncd/internal/provider/local"
	"github.com/microlet/microlet/services/cloudsyncd/internal/provider/static"
)

const clusterFile = `nodes:
  node-a:
    provider_id: static://rack1/node-a
    instance_type: m1
    zone: z1
    region: r1
    labels: {example.com/pool: gpu}
    addresses:
    - {type: InternalIP, address: 10.0.0.1}
  node-b:
    provider_id: static://rack1/node-b
    shutdown: true
    addresses:
    - {type: InternalIP, address: 10.0.0.2}
`

func node(name, providerID string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: providerID}}
}

func TestStaticAnswersForEveryNode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cloud.yaml")
	if err := os.WriteFile(path, []byte(clusterFile), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Provider: static.Name, StaticFile: path})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.LoadBalancer(); ok {
		t.Error("static has no load balancers")
	}
	inst, ok := c.InstancesV2()
	if !ok {
		t.Fatal("static must serve InstancesV2")
	}
	ctx := context.Background()
	for _, tc := range []struct {
		node           *corev1.Node
		exists, down   bool
		providerID, ip string
	}{
		{node("node-a", ""), true, false, "static://rack1/node-a", "10.0.0.1"},
		{node("node-b", "static://rack1/node-b"), true, true, "static://rack1/node-b", "10.0.0.2"},
		// Renamed Node on the same instance: found by provider ID.
		{node("node-b2", "static://rack1/node-b"), true, true, "static://rack1/node-b", "10.0.0.2"},
		{node("node-gone", ""), false, false, "", ""},
	} {
		t.Run(tc.node.Name, func(t *testing.T) {
			exists, err := inst.InstanceExists(ctx, tc.node)
			if err != nil || exists != tc.exists {
				t.Fatalf("InstanceExists = %v, %v; want %v", exists, err, tc.exists)
			}
			down, err := inst.InstanceShutdown(ctx, tc.node)
			md, mdErr := inst.InstanceMetadata(ctx, tc.node)
			if !tc.exists {
				if !errors.Is(err, cloudprovider.InstanceNotFound) || !errors.Is(mdErr, cloudprovider.InstanceNotFound) {
					t.Fatalf("unknown node: shutdown err %v, metadata err %v; want InstanceNotFound", err, mdErr)
				}
				return
			}
			if err != nil || down != tc.down {
				t.Fatalf("InstanceShutdown = %v, %v; want %v", down, err, tc.down)
			}
			if mdErr != nil || md.ProviderID != tc.providerID || md.NodeAddresses[0].Address != tc.ip {
				t.Fatalf("InstanceMetadata = %+v, %v", md, mdErr)
			}
		})
	}
	md, _ := inst.InstanceMetadata(ctx, node("node-a", ""))
	if md.InstanceType != "m1" || md.Zone != "z1" || md.Region != "r1" || md.AdditionalLabels["example.com/pool"] != "gpu" {
		t.Fatalf("node-a metadata %+v", md)
	}

	// A file broken by an edit is an error, never "the instance is gone".
	if err := os.WriteFile(path, []byte("nodes:\n  node-a:\n    addresses: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the broken file noticed", 60*time.Second, func() error {
		exists, err := inst.InstanceExists(ctx, node("node-a", ""))
		if err == nil {
			return errors.New("InstanceExists still answers without error")
		}
		if !strings.Contains(err.Error(), "nodes.node-a.addresses") || exists {
			t.Fatalf("broken file: %v %v", exists, err)
		}
		return nil
	})
}

func TestStaticSingleNodeFormRefusesClusterQuestions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cloud.yaml")
	if err := os.WriteFile(path, []byte("addresses:\n- {type: InternalIP, address: 10.0.0.1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Provider: static.Name, StaticFile: path})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	inst, _ := c.InstancesV2()
	exists, err := inst.InstanceExists(context.Background(), node("any", ""))
	if err == nil || exists || !strings.Contains(err.Error(), "single-node form") {
		t.Fatalf("InstanceExists = %v, %v; want an error naming the single-node form", exists, err)
	}
}

func TestNewErrorsNameTheKey(t *testing.T) {
	kube := WithKubeClient(fake.NewClientset())
	for _, tc := range []struct {
		cfg  Config
		want string
		opts []Option
	}{
		{Config{}, "cloud_provider: required", nil},
		{Config{Provider: "static"}, "static_file: required", nil},
		{Config{Provider: "static", StaticFile: "/nonexistent/cloud.yaml"}, "static_file /nonexistent/cloud.yaml", nil},
		{Config{Provider: "external"}, "external_endpoint: required", nil},
		{Config{Provider: "external", ExternalEndpoint: "tcp://1.2.3.4:5"}, "external_endpoint", nil},
		{Config{Provider: "local"}, "cloud_provider local: needs a kubeconfig", nil},
		{Config{Provider: "local", Local: local.Settings{Pool: []string{"127.0.1.0/24", "bad"}}}, `local_lb_pool[1] "bad"`, []Option{kube}},
		{Config{Provider: "local", Local: local.Settings{UDPIdleTimeout: -time.Second}}, `local_udp_idle_timeout: Invalid value: "-1s"`, []Option{kube}},
		{Config{Provider: "no-such-cloud"}, `cloud_provider "no-such-cloud"`, nil},
	} {
		t.Run(tc.want, func(t *testing.T) {
			c, err := New(tc.cfg, append(tc.opts, WithLogger(slog.Default()))...)
			if err == nil {
				_ = c.Close()
				t.Fatalf("New(%+v) succeeded, want an error containing %q", tc.cfg, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("New(%+v) = %q, want one line containing %q", tc.cfg, err, tc.want)
			}
		})
	}
}

func TestLocalCloud(t *testing.T) {
	c, err := New(Config{Provider: local.Name}, WithKubeClient(fake.NewClientset()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.LoadBalancer(); !ok {
		t.Error("local serves load balancers")
	}
	if _, ok := c.InstancesV2(); !ok {
		t.Error("local serves InstancesV2")
	}
	if r, ok := c.Routes(); !ok || r == nil {
		t.Error("local serves routes (kernel routes of this host)")
	}
	if c.ProviderName() != "local" {
		t.Errorf("ProviderName %q", c.ProviderName())
	}
}
