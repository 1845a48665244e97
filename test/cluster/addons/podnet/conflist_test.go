package podnet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

func TestConflistParsesAsCNI(t *testing.T) {
	data, err := Conflist("10.244.3.0/24")
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(data)
	if err != nil {
		t.Fatalf("libcni rejects the conflist: %v\n%s", err, data)
	}
	if list.Name != NetworkName || list.CNIVersion != "1.0.0" {
		t.Errorf("name %q version %q", list.Name, list.CNIVersion)
	}
	var types []string
	for _, p := range list.Plugins {
		types = append(types, p.Network.Type)
	}
	if got := strings.Join(types, ","); got != "bridge,portmap,loopback" {
		t.Errorf("plugins %s, want bridge,portmap,loopback", got)
	}
	if !strings.Contains(string(list.Plugins[0].Bytes), `"subnet":"10.244.3.0/24"`) {
		t.Errorf("bridge plugin does not allocate from the podCIDR: %s", list.Plugins[0].Bytes)
	}
}

func TestConflistRejectsBadCIDR(t *testing.T) {
	for _, c := range []string{"", "10.244.3.1/24", "fd00::/64", "10.244.3.0/31", "node-a"} {
		if _, err := Conflist(c); err == nil || !strings.Contains(err.Error(), "podCIDR") {
			t.Errorf("Conflist(%q) = %v, want an error naming podCIDR", c, err)
		}
	}
}

func TestWriteConflistReplacesAtomicallyAndReportsChange(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net.d")
	a, _ := Conflist("10.244.1.0/24")
	b, _ := Conflist("10.244.2.0/24")
	for i, step := range []struct {
		data    []byte
		changed bool
	}{{a, true}, {a, false}, {b, true}} {
		changed, err := WriteConflist(dir, step.data)
		if err != nil {
			t.Fatal(err)
		}
		if changed != step.changed {
			t.Errorf("step %d: changed=%v, want %v", i, changed, step.changed)
		}
		got, err := os.ReadFile(filepath.Join(dir, ConflistName))
		if err != nil || string(got) != string(step.data) {
			t.Fatalf("step %d: file %q, %v", i, got, err)
		}
	}
	// Only the conflist is left: no temporary files a runtime could pick up.
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Errorf("files in %s: %v, want only %s", dir, ents, ConflistName)
	}
}
