package cni

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/statefile/statefiletest"
)

func write(t *testing.T, dir, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func newManager(t *testing.T, podNetwork string) (*Manager, string, string) {
	t.Helper()
	conf, bin := t.TempDir(), t.TempDir()
	m, err := New(Options{ConfDir: conf, BinDirs: []string{bin}, DataDir: t.TempDir(), PodNetwork: podNetwork,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return m, conf, bin
}

func plugin(t *testing.T, bin, name string) {
	t.Helper()
	write(t, bin, name, "#!/bin/sh\n")
	if err := os.Chmod(filepath.Join(bin, name), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestStatusFollowsTheDirectory(t *testing.T) {
	m, conf, bin := newManager(t, "")
	wantErr := func(sub string) {
		t.Helper()
		err := m.Status()
		if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), sub) {
			t.Fatalf("Status = %v, want not ready naming %q", err, sub)
		}
	}
	wantErr("no network config found in " + conf)
	write(t, conf, "10-a.conflist", `{"cniVersion":"1.0.0","name":"a","plugins":[`)
	wantErr("10-a.conflist")
	write(t, conf, "20-b.conf", `{"cniVersion":"1.0.0","name":"b","type":"bridge"}`)
	wantErr(`plugin "bridge" not found in ` + bin)
	plugin(t, bin, "bridge")
	if err := m.Status(); err != nil {
		t.Fatal(err)
	}
	if n, _ := m.current(); n.list.Name != "b" || len(n.list.Plugins) != 1 {
		t.Fatalf("loaded %+v, want the single-plugin file as a list of one", n.list)
	}
	// The lexically first valid file wins; a changed file is read again.
	write(t, conf, "05-c.conflist", `{"cniVersion":"1.0.0","name":"c","plugins":[{"type":"bridge"},{"type":"portmap"}]}`)
	wantErr(`plugin "portmap"`)
	plugin(t, bin, "portmap")
	if n, err := m.current(); err != nil || n.list.Name != "c" {
		t.Fatalf("current = %v, %v; want network c", n, err)
	}
}

func TestGeneratedConfigOnlyWithoutAnOperatorOne(t *testing.T) {
	m, conf, bin := newManager(t, PodNetworkBridge)
	for _, p := range []string{"bridge", "host-local", "portmap", "firewall", "loopback"} {
		plugin(t, bin, p)
	}
	var inv *InvalidArgumentError
	if err := m.UpdatePodCIDR("10.1.0.0/16,nonsense"); !errors.As(err, &inv) || !strings.Contains(err.Error(), "nonsense") {
		t.Fatalf("UpdatePodCIDR(bad) = %v", err)
	}
	if err := m.UpdatePodCIDR("10.1.2.0/24,fd00:1:2::/64"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(conf, GeneratedFile))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Name    string `json:"name"`
		Plugins []struct {
			Type string `json:"type"`
			IPAM struct {
				Ranges [][]struct{ Subnet string } `json:"ranges"`
				Routes []struct{ Dst string }      `json:"routes"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, p := range got.Plugins {
		types = append(types, p.Type)
	}
	if strings.Join(types, ",") != "bridge,portmap,firewall,loopback" || len(got.Plugins[0].IPAM.Ranges) != 2 ||
		got.Plugins[0].IPAM.Ranges[1][0].Subnet != "fd00:1:2::/64" || len(got.Plugins[0].IPAM.Routes) != 2 {
		t.Fatalf("generated config:\n%s", data)
	}
	if err := m.Status(); err != nil {
		t.Fatal(err)
	}
	// An operator's file wins even when it sorts after the generated one,
	// and a later pod CIDR does not touch the generated file.
	write(t, conf, "zz-op.conflist", `{"cniVersion":"1.0.0","name":"op","plugins":[{"type":"bridge"}]}`)
	if n, err := m.current(); err != nil || n.list.Name != "op" {
		t.Fatalf("current = %v, %v; want the operator's network", n, err)
	}
	if err := m.UpdatePodCIDR("10.9.0.0/24"); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(conf, GeneratedFile)); string(again) != string(data) {
		t.Fatal("generated file rewritten while an operator config exists")
	}
}

func TestCapabilityArgs(t *testing.T) {
	c := &runtimeapi.PodSandboxConfig{
		PortMappings: []*runtimeapi.PortMapping{
			{Protocol: runtimeapi.Protocol_UDP, ContainerPort: 53, HostPort: 5353, HostIp: "127.0.0.1"},
			{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 80}, // no host port: not the plugins' business
		},
		Annotations: map[string]string{AnnotationIngressBandwidth: "10M"},
		DnsConfig:   &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"ns.svc.cluster.local"}},
	}
	caps, err := capabilityArgs(c)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(caps)
	want := `{"bandwidth":{"ingressRate":10000000,"ingressBurst":2147483647},"dns":{"servers":["10.96.0.10"],"searches":["ns.svc.cluster.local"]},"portMappings":[{"hostPort":5353,"containerPort":53,"protocol":"udp","hostIP":"127.0.0.1"}]}`
	if string(b) != want {
		t.Fatalf("capability args\n got %s\nwant %s", b, want)
	}
	c.Annotations[AnnotationEgressBandwidth] = "lots"
	var inv *InvalidArgumentError
	if _, err := capabilityArgs(c); !errors.As(err, &inv) || !strings.Contains(err.Error(), AnnotationEgressBandwidth) {
		t.Fatalf("bad bandwidth: %v", err)
	}
}

func TestTearDownWithoutRecord(t *testing.T) {
	m, _, _ := newManager(t, "")
	if err := m.TearDown(t.Context(), "0123456789ab"); err != nil {
		t.Fatalf("TearDown of a sandbox never attached: %v", err)
	}
	if m.Attached("0123456789ab") || m.PodIPs("0123456789ab") != nil {
		t.Fatal("never-attached sandbox reports an attachment")
	}
}

// TestTearDownCorruptRecord garbles a sandbox's record: TearDown moves it
// aside with a Warning line, runs DEL with the configured network for the
// sandbox, and succeeds, instead of failing on every StopPodSandbox.
func TestTearDownCorruptRecord(t *testing.T) {
	conf, bin, data := t.TempDir(), t.TempDir(), t.TempDir()
	var logBuf bytes.Buffer
	m, err := New(Options{ConfDir: conf, BinDirs: []string{bin}, DataDir: data,
		Log: slog.New(slog.NewTextHandler(&logBuf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(t.TempDir(), "calls")
	write(t, bin, "recorder", "#!/bin/sh\necho \"$CNI_COMMAND $CNI_CONTAINERID\" >> "+calls+"\n")
	if err := os.Chmod(filepath.Join(bin, "recorder"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, conf, "10-rec.conflist", `{"cniVersion":"1.0.0","name":"rec","plugins":[{"type":"recorder"}]}`)
	const id = "0123456789ab"
	dir := filepath.Join(data, "sandboxes")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(dir, id+".json")
	write(t, dir, id+".json", `{"sandbox_id":"0123`)

	if err := m.TearDown(t.Context(), id); err != nil {
		t.Fatalf("TearDown with a corrupt record: %v", err)
	}
	if _, err := os.Stat(rec); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("corrupt record still in place: %v", err)
	}
	statefiletest.MovedAside(t, rec, statefiletest.Want{Content: []byte(`{"sandbox_id":"0123`), Log: &logBuf})
	if b, _ := os.ReadFile(calls); string(b) != "DEL "+id+"\n" {
		t.Fatalf("plugin calls %q, want one DEL for the sandbox", b)
	}
	if m.Attached(id) || len(m.Sandboxes()) != 0 {
		t.Fatal("sandbox still listed as attached")
	}
}
