package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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

// TestValidID: the ID rule ValidID implements, held to the regexp it
// replaced, on chosen cases and on fuzzed ones.
func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"":                             false,
		"a":                            true,
		"0f3e":                         true,
		"abc_DEF.1-2":                  true,
		"_abc":                         false,
		".hidden":                      false,
		"-x":                           false,
		"a/b":                          false,
		"../etc":                       false,
		"a b":                          false,
		"é":                            false,
		strings.Repeat("a", 128):       true,
		strings.Repeat("a", 129):       false,
		"a" + strings.Repeat(".", 127): true,
	} {
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
}

// FuzzValidID: ValidID agrees with the regexp it replaced.
func FuzzValidID(f *testing.F) {
	re := regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$`)
	for _, s := range []string{"", "a", "a-b", "_", strings.Repeat("z", 128), strings.Repeat("z", 129), "a\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if got, want := ValidID(id), re.MatchString(id); got != want {
			t.Fatalf("ValidID(%q) = %v, the regexp says %v", id, got, want)
		}
	})
}
