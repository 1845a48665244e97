package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoKubernetesAPI: runtime-shim never talks to the API server, so
// it must not link client-go's clientset or the k8s.io/api groups — their
// package initialisation registers every API group's types at start-up, heap
// and executable pages each idle node would carry (docs/footprint.md). The
// shared service plumbing once brought them in through a host-name helper.
func TestLinksNoKubernetesAPI(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "k8s.io/client-go/kubernetes") || strings.HasPrefix(pkg, "k8s.io/api/") {
			t.Errorf("runtime-shim links %s", pkg)
		}
	}
}
