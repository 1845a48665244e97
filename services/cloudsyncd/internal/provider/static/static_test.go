package static

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func doc(ip string) string {
	return fmt.Sprintf("provider_id: static://lab/n1\ninstance_type: m1\nzone: z1\nregion: r1\nlabels: {example.com/pool: gpu}\naddresses:\n- {type: InternalIP, address: %s}\n- {type: Hostname, address: n1}\n", ip)
}

// waitAddr waits until the provider's first address is want, or its error
// contains want when want starts with "error:".
func waitAddr(t *testing.T, p *Provider, want string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ch := p.Changed()
		addrs, err := p.NodeAddresses(context.Background())
		var got string
		if err != nil {
			got = "error: " + err.Error()
		} else {
			got = addrs[0].Address
		}
		if got == want || (strings.HasPrefix(want, "error:") && strings.Contains(got, strings.TrimPrefix(want, "error: "))) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %q, want %q", got, want)
		}
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
		}
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestStaticFileFollowsEdits(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cloud.yaml")
	write(t, path, doc("10.0.0.1"))
	p, err := New(path, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	md, err := p.InstanceMetadata(context.Background())
	if err != nil || md.ProviderID != "static://lab/n1" || md.Zone != "z1" || md.AdditionalLabels["example.com/pool"] != "gpu" {
		t.Fatalf("metadata %+v %v", md, err)
	}

	write(t, path, doc("10.0.0.2")) // in place
	waitAddr(t, p, "10.0.0.2")

	tmp := filepath.Join(dir, ".tmp")
	write(t, tmp, doc("10.0.0.3")) // editor-style rename over
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitAddr(t, p, "10.0.0.3")

	write(t, path, "addresses:\n- {type: InternalIP, address: not-an-ip}\n")
	waitAddr(t, p, "error: addresses[0].address \"not-an-ip\"")

	write(t, path, doc("10.0.0.4"))
	waitAddr(t, p, "10.0.0.4")
}

// TestStaticConfigMapSwap reproduces the kubelet's atomic writer: the file is a
// symlink through ..data, and an update swaps ..data to a new directory.
func TestStaticConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	mkver := func(name, ip string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name, "cloud.yaml"), doc(ip))
	}
	mkver("..v1", "10.1.0.1")
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/cloud.yaml", filepath.Join(dir, "cloud.yaml")); err != nil {
		t.Fatal(err)
	}
	p, err := New(filepath.Join(dir, "cloud.yaml"), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitAddr(t, p, "10.1.0.1")

	mkver("..v2", "10.1.0.2")
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..v1")); err != nil {
		t.Fatal(err)
	}
	waitAddr(t, p, "10.1.0.2")
}

func TestParseErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "empty"},
		{"adresses: []\n", "field adresses not found"},
		{"zone: z\n", "addresses: at least one"},
		{"addresses:\n- {type: Foo, address: x}\n", `addresses[0].type "Foo"`},
		{"addresses:\n- {type: InternalIP}\n", "addresses[0].address: empty"},
		{"provider_id: nope\naddresses:\n- {type: Hostname, address: a}\n", "provider_id"},
		{"labels: {'bad key!': x}\naddresses:\n- {type: Hostname, address: a}\n", "labels: key"},
		{"zone: 'a b'\naddresses:\n- {type: Hostname, address: a}\n", "zone"},
		{"addresses: 5\n", "line 1: cannot unmarshal"},
		{"nodes:\n  n1:\n    addresses: []\n", "nodes.n1.addresses: at least one"},
		{"nodes:\n  n1:\n    zone: 'a b'\n    addresses:\n    - {type: Hostname, address: a}\n", "nodes.n1.zone"},
		{"nodes:\n  n1:\n    adresses: []\n", "field adresses not found"},
		{"zone: z\nnodes:\n  n1:\n    addresses:\n    - {type: Hostname, address: a}\n", "cannot both be set"},
		{"nodes:\n  Bad_Name:\n    addresses:\n    - {type: Hostname, address: a}\n", `nodes: name "Bad_Name"`},
		{"nodes:\n  a:\n    provider_id: x://1\n    addresses:\n    - {type: Hostname, address: a}\n  b:\n    provider_id: x://1\n    addresses:\n    - {type: Hostname, address: b}\n", `nodes.b.provider_id "x://1": also the provider_id of nodes.a`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%q) = %v, want an error containing %q", tc.in, err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
		})
	}
	if _, err := New(filepath.Join(t.TempDir(), "missing.yaml"), slog.Default()); err == nil {
		t.Fatal("a missing file must be an error at startup")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(doc("10.0.0.1")))
	f.Add([]byte("addresses:\n- {type: InternalIP, address: ::1}\n"))
	f.Add([]byte("labels: {a: b}\n"))
	f.Add([]byte("{"))
	f.Add([]byte("nodes:\n  n1:\n    provider_id: a://b\n    addresses:\n    - {type: InternalIP, address: 10.0.0.1}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			return
		}
		if len(file.Nodes) == 0 && len(file.NodeAddresses()) == 0 {
			t.Fatal("accepted a file without addresses")
		}
		for name, n := range file.Nodes {
			if len(n.NodeAddresses()) == 0 {
				t.Fatalf("accepted nodes.%s without addresses", name)
			}
			if got, ok, err := file.Lookup(name, ""); err != nil || !ok || got.ProviderID != n.ProviderID {
				t.Fatalf("Lookup(%q) = %v %v %v", name, got, ok, err)
			}
		}
		_ = file.Metadata()
	})
}

func TestClusterFormInNodeMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cloud.yaml")
	write(t, path, "nodes:\n  n1:\n    provider_id: static://lab/n1\n    addresses:\n    - {type: InternalIP, address: 10.0.0.1}\n  n2:\n    shutdown: true\n    addresses:\n    - {type: InternalIP, address: 10.0.0.2}\n")
	ctx := context.Background()
	p, err := New(path, slog.Default(), WithNodeName("n2"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitAddr(t, p, "10.0.0.2")
	if down, err := p.InstanceShutdown(ctx); err != nil || !down {
		t.Fatalf("n2 shutdown = %v, %v; want true", down, err)
	}
	other, err := New(path, slog.Default(), WithNodeName("n3"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	waitAddr(t, other, `error: nodes: no entry for this node "n3"`)
}
