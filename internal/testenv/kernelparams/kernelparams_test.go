package kernelparams

import "testing"

func TestStringParseRoundTrip(t *testing.T) {
	in := Values{"vm/overcommit_memory": 1, "kernel/panic": 10, "kernel/keys/root_maxkeys": 1000000}
	got, err := Parse(in.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(in) {
		t.Fatalf("got %v, want %v", got, in)
	}
	for k, v := range in {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	if want := "kernel.keys.root_maxkeys=1000000\nkernel.panic=10\nvm.overcommit_memory=1\n"; in.String() != want {
		t.Errorf("String() = %q, want %q", in.String(), want)
	}
	if _, err := Parse("kernel.panic=ten"); err == nil {
		t.Error("Parse accepted a non-integer value")
	}
}

func TestReadKubeletParams(t *testing.T) {
	v, err := Read(Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != len(Kubelet) {
		t.Fatalf("read %d of %d", len(v), len(Kubelet))
	}
	if d := Diff(v); d != "" {
		t.Errorf("Diff right after Read = %q", d)
	}
}
