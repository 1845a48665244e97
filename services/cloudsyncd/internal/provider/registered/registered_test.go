package registered

import (
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	fakecloud "k8s.io/cloud-provider/fake"

	"github.com/microlet/microlet/services/cloudsyncd/internal/provider"
)

var addrs = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.2.0.1"}}

// Providers registered the way a real cloud's package does in its init.
func init() {
	cloudprovider.RegisterCloudProvider("test-v2", func(io.Reader) (cloudprovider.Interface, error) {
		return &fakecloud.Cloud{
			EnableInstancesV2: true,
			Addresses:         addrs,
			ProviderID:        map[types.NodeName]string{"node-a": "fake://v2/node-a"},
			InstanceTypes:     map[types.NodeName]string{"fake://v2/node-a": "big"},
			Zone:              cloudprovider.Zone{FailureDomain: "za", Region: "ra"},
			AdditionalLabels:  map[string]string{"example.com/x": "y"},
			NodeShutdown:      true,
		}, nil
	})
	cloudprovider.RegisterCloudProvider("test-v1", func(cfg io.Reader) (cloudprovider.Interface, error) {
		b, _ := io.ReadAll(cfg)
		return &fakecloud.Cloud{
			Provider:      "fakev1",
			Addresses:     addrs,
			ExtID:         map[types.NodeName]string{"node-a": "i-" + strings.TrimSpace(string(b))},
			InstanceTypes: map[types.NodeName]string{"node-a": "small"},
			Zone:          cloudprovider.Zone{FailureDomain: "zb", Region: "rb"},
		}, nil
	})
	cloudprovider.RegisterCloudProvider("test-none", func(io.Reader) (cloudprovider.Interface, error) {
		return &fakecloud.Cloud{DisableInstances: true}, nil
	})
}

func TestInstancesV2Preferred(t *testing.T) {
	p, err := New("test-v2", "", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	md, err := p.InstanceMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if md.ProviderID != "fake://v2/node-a" || md.Zone != "za" || md.Region != "ra" || md.AdditionalLabels["example.com/x"] != "y" {
		t.Fatalf("metadata %+v", md)
	}
	// The second call carries the learnt provider ID, so the type resolves.
	if md, _ = p.InstanceMetadata(ctx); md.InstanceType != "big" {
		t.Fatalf("instance type %q, want big", md.InstanceType)
	}
	got, err := p.NodeAddresses(ctx)
	if err != nil || !provider.EqualAddresses(got, addrs) {
		t.Fatalf("addresses %v %v", got, err)
	}
	if down, err := p.InstanceShutdown(ctx); err != nil || !down {
		t.Fatalf("shutdown %v %v", down, err)
	}
	calls := p.cloud.(*fakecloud.Cloud).Calls
	if slices.Contains(calls, "instance-id") || slices.Contains(calls, "get-zone-by-node-name") {
		t.Fatalf("Instances/Zones used although InstancesV2 exists: %v", calls)
	}
}

func TestInstancesAndZonesFallback(t *testing.T) {
	dir := t.TempDir()
	cfg := dir + "/cloud.conf"
	if err := os.WriteFile(cfg, []byte("42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := New("test-v1", cfg, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	md, err := p.InstanceMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if md.ProviderID != "fakev1://i-42" || md.InstanceType != "small" || md.Zone != "zb" || md.Region != "rb" || !provider.EqualAddresses(md.Addresses, addrs) {
		t.Fatalf("metadata %+v", md)
	}
	if down, err := p.InstanceShutdown(ctx); err != nil || down {
		t.Fatalf("shutdown %v %v", down, err)
	}
}

func TestRegisteredErrors(t *testing.T) {
	for _, tc := range []struct{ name, cfg, want string }{
		{"nope", "", `cloud_provider "nope": not a built-in provider`},
		{"test-v1", "/does/not/exist", "cloud_config"},
		{"test-none", "", "neither InstancesV2 nor Instances"},
	} {
		if _, err := New(tc.name, tc.cfg, "n"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s) = %v, want %q", tc.name, err, tc.want)
		}
	}
	if !Exists("test-v2") || Exists("nope") {
		t.Fatal("Exists is wrong")
	}
}
