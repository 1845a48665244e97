package manifest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// upstreamGolden is what upstream's own file source and PodConfig made of
// testdata/parity, written by services/podconfig/bench/cmd/upstreamparity.
type upstreamGolden struct {
	Dir      string                 `json:"dir"`
	Node     string                 `json:"node"`
	Accepted []string               `json:"accepted"`
	Pods     map[string]*corev1.Pod `json:"pods"`
}

// TestUpstreamParity proves, for the sample manifests, that podconfig
// accepts and refuses what the kubelet does and produces the same pods:
// same UID, name, spec, annotations and status.
func TestUpstreamParity(t *testing.T) {
	raw, err := os.ReadFile("testdata/parity/upstream.json")
	if err != nil {
		t.Fatal(err)
	}
	var g upstreamGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("testdata/parity/*.*")
	if err != nil {
		t.Fatal(err)
	}
	var accepted []string
	for _, f := range files {
		base := filepath.Base(f)
		if base == "upstream.json" {
			continue
		}
		t.Run(base, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParsePod(data, Source{NodeName: g.Node, Location: filepath.Join(g.Dir, base), File: true})
			if strings.HasPrefix(base, "9") {
				if err == nil {
					t.Fatalf("accepted %s, which upstream refuses", got.Name)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			accepted = append(accepted, got.Name)
			want, ok := g.Pods[got.Name]
			if !ok {
				t.Fatalf("upstream has no pod %s", got.Name)
			}
			gj, _ := json.MarshalIndent(got, "", "  ")
			wj, _ := json.MarshalIndent(want, "", "  ")
			if string(gj) != string(wj) {
				t.Fatalf("pod differs from upstream's\n--- podconfig\n%s\n--- upstream\n%s", gj, wj)
			}
		})
	}
	slices.Sort(accepted)
	if !slices.Equal(accepted, g.Accepted) {
		t.Fatalf("accepted %v, upstream accepted %v", accepted, g.Accepted)
	}
}
