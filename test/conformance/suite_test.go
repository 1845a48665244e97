package conformance

import (
	"slices"
	"strings"
	"testing"
)

// e2e_node.test has none of e2e.test's cluster flags (it exits on an
// unknown one): a node suite run passes only its own, and the file filters
// go to Ginkgo.
func TestSuiteArgsNodeE2E(t *testing.T) {
	s := Suite{
		E2ETest: "/x/e2e_node.test", Kubeconfig: "/k", Kubectl: "/kubectl", ResultsDir: "/r",
		Focus: E2ENodeFocus, Skip: E2ENodeSkip, FocusFile: E2ENodeFocusFile, SkipFile: "lifecycle",
		Node: &NodeE2E{Host: "https://127.0.0.1:1", BearerToken: "tok", NodeName: "n", DNSDomain: "cluster.local", RuntimeEndpoint: "unix:///run/rt.sock"},
	}
	for _, tc := range []struct {
		name        string
		ginkgo      string
		procs       int
		ginkgoFlag  string
		ginkgoFirst bool
	}{
		{"serial: e2e_node.test alone", "", 1, "--ginkgo.", false},
		{"parallel: the ginkgo CLI", "/x/ginkgo", 3, "--", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := s
			s.Ginkgo, s.Procs = tc.ginkgo, tc.procs
			args := s.Args()
			if tc.ginkgoFirst != (args[0] == "/x/ginkgo") {
				t.Fatalf("args start %q", args[0])
			}
			for _, want := range []string{
				tc.ginkgoFlag + "focus-file=" + E2ENodeFocusFile, tc.ginkgoFlag + "skip-file=lifecycle",
				"--host=https://127.0.0.1:1", "--bearer-token=tok", "--node-name=n", "--dns-domain=cluster.local",
				"--container-runtime-endpoint=unix:///run/rt.sock", "--start-services=false", "--prepull-images=false",
				"--report-dir=/r", "--kubectl-path=/kubectl",
			} {
				if !slices.Contains(args, want) {
					t.Errorf("no %s in %q", want, args)
				}
			}
			for _, a := range args {
				for _, bad := range []string{"--provider", "--kubeconfig", "--minStartupPods", "--e2e-output-dir"} {
					if strings.HasPrefix(a, bad) {
						t.Errorf("e2e.test flag %s given to e2e_node.test", a)
					}
				}
			}
		})
	}
}
