package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSIG(t *testing.T) {
	for name, want := range map[string]string{
		"[sig-node] Pods should run [NodeConformance] [Conformance]":               "node",
		"[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] x":         "api-machinery",
		"[sig-cli] Kubectl client [sig-node] Kubectl logs should be [Conformance]": "cli",
		"Conformance Tests should have at least two untainted nodes":               "other",
	} {
		if got := SIG(name); got != want {
			t.Errorf("SIG(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestFullPhasesSplitSerial(t *testing.T) {
	ph := FullPhases(5)
	if len(ph) != 2 || ph[0].Procs != 5 || ph[1].Procs != 1 {
		t.Fatalf("phases = %+v", ph)
	}
	res := func(exprs ...string) []string { return exprs }
	focusP, _ := compileAll(res(ph[0].Focus))
	skipP, _ := compileAll(res(ph[0].Skip))
	focusS, _ := compileAll(res(ph[1].Focus))
	skipS, _ := compileAll(res(ph[1].Skip))
	for name, want := range map[string]string{
		"[sig-apps] Daemon set [Serial] should rollback [Conformance]":         PhaseSerial,
		"[sig-node] NoExecuteTaintManager [Serial] [Disruptive] [Conformance]": PhaseSerial,
		"[sig-network] DNS should provide DNS for services [Conformance]":      PhaseParallel,
		"[sig-network] not conformance":                                        "",
	} {
		inP := matchesAny(focusP, name, true) && !matchesAny(skipP, name, false)
		inS := matchesAny(focusS, name, true) && !matchesAny(skipS, name, false)
		got := ""
		switch {
		case inP && inS:
			got = "both"
		case inP:
			got = PhaseParallel
		case inS:
			got = PhaseSerial
		}
		if got != want {
			t.Errorf("%q runs in %q, want %q", name, got, want)
		}
	}
}

// TestFullReport merges two phases (the same file twice, as the serial
// phase's stand-in) and writes the section: counts per SIG and the
// failures with their reasons.
func TestFullReport(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{PhaseParallel, PhaseSerial} {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := TrimJUnit("testdata/junit_01.xml", filepath.Join(dir, p, JUnitFile)); err != nil {
			t.Fatal(err)
		}
	}
	merged := filepath.Join(dir, JUnitFile)
	if err := MergeJUnit(merged, filepath.Join(dir, PhaseParallel, JUnitFile), filepath.Join(dir, PhaseSerial, JUnitFile)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(merged)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "<testsuite "); n != 2 {
		t.Errorf("merged file has %d testsuites, want 2", n)
	}
	col, err := LoadFullColumn("microlet", dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(col.Phases) != 2 {
		t.Fatalf("phases = %d", len(col.Phases))
	}
	// The same spec in both phases counts once.
	if got := len(col.Selected()); got != 5 {
		t.Errorf("selected = %d, want 5", got)
	}
	reasons, err := LoadReasons("testdata/reasons.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := WriteFullReport(&out, []FullColumn{col, {Name: "kubelet", Phases: col.Phases}}, reasons); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"| **passed** | **1 of 5** | **1 of 5** |",
		"| node | 1 / 3 / 5 | 1 / 3 / 5 |",
		"### Failures on microlet (full suite)",
		"Beta reads logs",
		"| parallel phase | 1 of 5 passed in ",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
}
