package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestStoreRoundTrip(t *testing.T) {
	s, err := NewStore(filepath.Join(t.TempDir(), "sb"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("abc"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing: %v", err)
	}
	in := Sandbox{ID: "abc", Name: "k8s_POD_a", Labels: map[string]string{"a": "b"}, Ports: []PortMapping{{Protocol: "TCP", ContainerPort: 80, HostPort: 8080}}}
	if err := s.Put(in); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get("abc")
	if err != nil || got.Name != in.Name || got.Labels["a"] != "b" || got.Ports[0].HostPort != 8080 || got.Version != 1 {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "bad.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	all, err := s.List()
	if len(all) != 1 || err == nil {
		t.Fatalf("List = %v, %v; want the good one and an error for the bad one", all, err)
	}
	if err := s.Delete("abc"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("abc"); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	if err := s.Put(Sandbox{ID: "../x"}); err == nil {
		t.Fatal("Put accepted a path-like id")
	}
}
