package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseJUnit(t *testing.T) {
	run, err := ParseJUnit("testdata/junit_01.xml")
	if err != nil {
		t.Fatal(err)
	}
	if run.Duration != 125500*time.Millisecond || run.Procs != "3" || run.Started.IsZero() {
		t.Errorf("suite: duration %s, procs %q, started %s", run.Duration, run.Procs, run.Started)
	}
	if len(run.Focus) != 1 || run.Focus[0] != `\[sig-node\].*\[Conformance\]` || len(run.Skip) != 1 {
		t.Errorf("focus %q skip %q", run.Focus, run.Skip)
	}
	want := map[string]Result{
		"[sig-node] Alpha runs a pod [NodeConformance] [Conformance]": Passed,
		"[sig-node] Beta reads logs | twice [Conformance]":            Failed,
		"[sig-node] Gamma exec times out [Conformance]":               Failed,
		"[sig-node] Delta needs a feature [Conformance]":              Skipped,
		"[sig-node] Zeta resizes [Conformance]":                       Failed,
	}
	sel := run.Selected()
	if len(sel) != len(want) {
		t.Fatalf("selected %d specs, want %d: %+v", len(sel), len(want), sel)
	}
	for _, c := range sel {
		if want[c.Name] != c.Result {
			t.Errorf("%s: %s, want %s", c.Name, c.Result, want[c.Name])
		}
	}
	for _, c := range sel {
		switch {
		case strings.HasPrefix(c.Name, "[sig-node] Beta"):
			if !strings.HasPrefix(c.Message, "expected log line\nExpected") || strings.Contains(c.Message, "beta.go") {
				t.Errorf("failure message %q: want the [FAILED] text without its location", c.Message)
			}
		case strings.HasPrefix(c.Name, "[sig-node] Gamma"):
			if !strings.HasPrefix(c.Message, "[TIMEDOUT]") {
				t.Errorf("timeout message %q", c.Message)
			}
		case strings.HasPrefix(c.Name, "[sig-node] Zeta"):
			if c.Message != "[PANICKED] runtime error: invalid memory address or nil pointer dereference" {
				t.Errorf("panic message %q", c.Message)
			}
		case strings.HasPrefix(c.Name, "[sig-node] Delta"):
			if c.Message != "Only supported for providers [gce]" {
				t.Errorf("skip reason %q", c.Message)
			}
		}
	}
	if n := run.Count(Passed); n != 1 {
		t.Errorf("passed %d", n)
	}
	if sf := run.SetupFailures(); len(sf) != 0 {
		t.Errorf("setup failures %+v", sf)
	}
}

func TestLoadReasons(t *testing.T) {
	for _, tc := range []struct{ name, yaml, err string }{
		{"bad regexp", "reasons:\n  - match: '('\n    reason: r\n    owner: host\n", "entry 1"},
		{"no owner", "reasons:\n  - match: a\n    reason: r\n", "owner are required"},
		{"unknown key", "reasons:\n  - match: a\n    reason: r\n    owner: host\n    issue: 3\n", "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "r.yaml")
			if err := os.WriteFile(p, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadReasons(p); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("err %v, want %q", err, tc.err)
			}
		})
	}
	// The checked-in mapping loads.
	if _, err := LoadReasons("reasons.yaml"); err != nil {
		t.Fatal(err)
	}
}

func TestWriteReport(t *testing.T) {
	run, err := ParseJUnit("testdata/junit_01.xml")
	if err != nil {
		t.Fatal(err)
	}
	reasons, err := LoadReasons("testdata/reasons.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	cols := []Column{{Name: "microlet", Run: run, Meta: Meta{Node: "microlet", E2E: "v1.36.3", Wall: "9 min 00 s"}}}
	if err := WriteReport(&b, cols, reasons, "the test"); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"| **passed** | **1 of 5** |",
		"| failed | 3 |",
		"| suite run time | 2 min 05 s (3 parallel processes) |",
		"| e2e.test | v1.36.3 |",
		// Grouped by cause, the unknown one shown as such.
		"| log lines are lost | #18 | 1: Beta reads logs \\| twice |",
		"| unknown: not triaged yet | owner unknown | 2: Gamma exec times out; Zeta resizes |",
		// Every selected spec, the pipe in a name escaped.
		"| [sig-node] Beta reads logs \\| twice [Conformance] | ❌ failed | 1 min 01 s | log lines are lost (#18) — `expected log line Expected <string>: \"\" to equal <string>: \"hello\"` |",
		"| [sig-node] Delta needs a feature [Conformance] | ⏭ skipped | 0.1 s | skipped: Only supported for providers [gce] |",
		"| [sig-node] Alpha runs a pod [NodeConformance] [Conformance] | ✅ passed | 12.5 s |  |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if got := shortName("[sig-node] InitContainer [NodeConformance] should run [Conformance]"); got != "InitContainer should run" {
		t.Errorf("shortName: %q", got)
	}
	// Specs the focus did not select are not listed.
	for _, absent := range []string{"Deployment runs", "Epsilon is serial"} {
		if strings.Contains(md, absent) {
			t.Errorf("report lists unselected %q", absent)
		}
	}
}

func TestTrimJUnit(t *testing.T) {
	out := filepath.Join(t.TempDir(), "junit.xml")
	if err := TrimJUnit("testdata/junit_01.xml", out); err != nil {
		t.Fatal(err)
	}
	orig, err := ParseJUnit("testdata/junit_01.xml")
	if err != nil {
		t.Fatal(err)
	}
	trimmed, err := ParseJUnit(out)
	if err != nil {
		t.Fatal(err)
	}
	var want []Case
	for _, c := range orig.Cases {
		if c.Selected {
			want = append(want, c)
		}
	}
	if len(trimmed.Cases) != len(want) || len(want) == len(orig.Cases) {
		t.Fatalf("trimmed has %d cases, want the %d selected of %d", len(trimmed.Cases), len(want), len(orig.Cases))
	}
	for i, c := range trimmed.Cases {
		if c != want[i] {
			t.Errorf("case %d: %+v, want %+v", i, c, want[i])
		}
	}
	if trimmed.Duration != orig.Duration || !trimmed.Started.Equal(orig.Started) || trimmed.Procs != orig.Procs ||
		strings.Join(trimmed.Focus, ",") != strings.Join(orig.Focus, ",") || strings.Join(trimmed.Skip, ",") != strings.Join(orig.Skip, ",") {
		t.Errorf("suite: %+v, want %+v", trimmed, orig)
	}
}

func TestWriteReportTwoColumns(t *testing.T) {
	run, err := ParseJUnit("testdata/junit_01.xml")
	if err != nil {
		t.Fatal(err)
	}
	reasons, err := LoadReasons("testdata/reasons.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The second run passed Beta where the first failed it.
	second := *run
	second.Cases = append([]Case(nil), run.Cases...)
	for i, c := range second.Cases {
		if strings.Contains(c.Name, "Beta") {
			second.Cases[i].Result, second.Cases[i].Message = Passed, ""
		}
	}
	var b strings.Builder
	cols := []Column{
		{Name: "microlet", Run: run, Meta: Meta{Node: "microlet"}},
		{Name: KubeletNodeName, Run: &second, Meta: Meta{Node: KubeletNodeName}},
	}
	if err := WriteReport(&b, cols, reasons, "the test"); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"| | microlet | kubelet on runtime-shim |",
		"| **passed** | **1 of 5** | **2 of 5** |",
		"upstream kubelet",
		"## Failures on kubelet on runtime-shim",
		"| Gamma exec times out | ❌ failed | unknown: not triaged yet (owner unknown) — `[TIMEDOUT] A suite timeout occurred` |",
		"| [sig-node] Beta reads logs \\| twice [Conformance] | ❌ failed | ✅ passed |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "is not in this report") {
		t.Error("a two-column report says the second run is missing")
	}
}
