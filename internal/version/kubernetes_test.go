package version

import (
	"bufio"
	"os"
	"strings"
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// TestKubernetesFollowsGoMod: Kubernetes is a release version clients
// parse, and the release of the API and client modules go.mod pins.
func TestKubernetesFollowsGoMod(t *testing.T) {
	v, err := utilversion.ParseSemantic(Kubernetes)
	if err != nil || v.PreRelease() != "" || !strings.HasPrefix(Kubernetes, "v") {
		t.Fatalf("Kubernetes = %q, want a release version vMAJOR.MINOR.PATCH (%v)", Kubernetes, err)
	}
	f, err := os.Open("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	want := map[string]bool{"k8s.io/api": true, "k8s.io/client-go": true}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(fields) < 2 || !want[fields[0]] {
			continue
		}
		delete(want, fields[0])
		if got := "v1" + strings.TrimPrefix(fields[1], "v0"); got != Kubernetes {
			t.Errorf("go.mod requires %s %s (release %s), but version.Kubernetes is %s", fields[0], fields[1], got, Kubernetes)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for p := range want {
		t.Errorf("go.mod does not require %s", p)
	}
}
