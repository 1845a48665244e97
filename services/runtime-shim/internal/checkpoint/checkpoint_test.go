package checkpoint

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/microlet/microlet/internal/statefile/statefiletest"
)

func TestStoreRoundTrip(t *testing.T) {
	s, err := NewStore(filepath.Join(t.TempDir(), "sb"), nil)
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
	all, err := s.List()
	if len(all) != 1 || err != nil {
		t.Fatalf("List = %v, %v", all, err)
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

// A garbled or truncated checkpoint is moved aside with a Warning naming
// both paths and counts as absent; the others are still listed and the
// shim goes on (Get answers ErrNotFound, List no error).
func TestCorruptCheckpointQuarantined(t *testing.T) {
	for name, content := range map[string]string{
		"garbled":   "\x00\xff{",
		"truncated": `{"version":1,"id":"bad","name":"k8s_POD_`,
	} {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			s, err := NewStore(filepath.Join(t.TempDir(), "sb"), slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Put(Sandbox{ID: "good", Name: "k8s_POD_g"}); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(s.dir, "bad.json")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			all, err := s.List()
			if err != nil || len(all) != 1 || all[0].ID != "good" {
				t.Fatalf("List = %+v, %v; want the good one and no error", all, err)
			}
			statefiletest.MovedAside(t, path, statefiletest.Want{Content: []byte(content), Log: &logs})
			if _, err := s.Get("bad"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get after quarantine: %v, want ErrNotFound", err)
			}
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get("bad"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get of a corrupt checkpoint: %v, want ErrNotFound", err)
			}
			// A new checkpoint under the same id is written and read.
			if err := s.Put(Sandbox{ID: "bad", Name: "k8s_POD_b"}); err != nil {
				t.Fatal(err)
			}
			if got, err := s.Get("bad"); err != nil || got.Name != "k8s_POD_b" {
				t.Fatalf("Get after a new Put: %+v, %v", got, err)
			}
		})
	}
}
