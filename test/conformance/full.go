package conformance

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// The full suite (SUITE=full): every [Conformance] spec of e2e.test, on a
// make cluster cluster, in two phases as sonobuoy's certified-conformance
// mode runs them: the parallel phase, then the [Serial] specs (the two
// [Disruptive] ones among them) in one process.
const (
	FullFocus    = `\[Conformance\]`
	ParallelSkip = `\[Serial\]|\[Disruptive\]|\[Flaky\]`
	SerialFocus  = `\[Serial\].*\[Conformance\]`
	SerialSkip   = `\[Flaky\]`
)

// Phase names, also the phases' directories under the results and the
// record.
const (
	PhaseParallel = "parallel"
	PhaseSerial   = "serial"
)

// Phase is one e2e.test run of the full suite.
type Phase struct {
	Name        string
	Focus, Skip string
	Procs       int
}

// FullPhases are the full suite's two runs: the parallel phase with procs
// processes, then the serial phase with one.
func FullPhases(procs int) []Phase {
	return []Phase{
		{Name: PhaseParallel, Focus: FullFocus, Skip: ParallelSkip, Procs: procs},
		{Name: PhaseSerial, Focus: SerialFocus, Skip: SerialSkip, Procs: 1},
	}
}

// sigTag is a spec's SIG: the first "[sig-...]" of its name.
var sigTag = regexp.MustCompile(`\[sig-([a-z-]+)\]`)

// SIG returns the spec's SIG ("node" for "[sig-node] ..."), or "other".
func SIG(name string) string {
	if m := sigTag.FindStringSubmatch(name); m != nil {
		return m[1]
	}
	return "other"
}

// PhaseRun is one phase's parsed junit file.
type PhaseRun struct {
	Phase string
	Run   *Run
}

// FullColumn is one node agent's full-suite run: its phases in order and
// the run's meta.json.
type FullColumn struct {
	Name   string
	Phases []PhaseRun
	Meta   Meta
	// Dir is the directory it was read from, shown in the report.
	Dir string
}

// LoadFullColumn reads a full run recorded in dir: dir/<phase>/junit_01.xml
// for each phase present, and dir/meta.json.
func LoadFullColumn(name, dir string) (FullColumn, error) {
	col := FullColumn{Name: name, Dir: dir}
	for _, p := range []string{PhaseParallel, PhaseSerial} {
		path := filepath.Join(dir, p, JUnitFile)
		if _, err := os.Stat(path); os.IsNotExist(err) {
			continue
		}
		run, err := ParseJUnit(path)
		if err != nil {
			return col, err
		}
		col.Phases = append(col.Phases, PhaseRun{Phase: p, Run: run})
	}
	if len(col.Phases) == 0 {
		return col, fmt.Errorf("%s: no phase's %s", dir, JUnitFile)
	}
	var err error
	col.Meta, err = LoadMeta(filepath.Join(dir, "meta.json"))
	return col, err
}

// Selected returns every selected spec of every phase, each spec once (a
// spec both phases selected counts as the later phase's).
func (c FullColumn) Selected() []Case {
	byName := map[string]Case{}
	for _, p := range c.Phases {
		for _, s := range p.Run.Selected() {
			byName[s.Name] = s
		}
	}
	out := make([]Case, 0, len(byName))
	for _, s := range byName {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// sigCount is one SIG's row of a column.
type sigCount struct{ passed, failed, skipped, total int }

func (c FullColumn) bySIG() map[string]*sigCount {
	m := map[string]*sigCount{}
	for _, s := range c.Selected() {
		sig := SIG(s.Name)
		n := m[sig]
		if n == nil {
			n = &sigCount{}
			m[sig] = n
		}
		n.total++
		switch s.Result {
		case Passed:
			n.passed++
		case Failed:
			n.failed++
		case Skipped:
			n.skipped++
		}
	}
	return m
}

// WriteFullReport writes the full suite's section of docs/conformance.md:
// per column the phases' run times and counts, a table per SIG, and every
// failure with its reason (reasons) and the other columns' result.
func WriteFullReport(w io.Writer, cols []FullColumn, reasons *Reasons) error {
	if len(cols) == 0 {
		return fmt.Errorf("no full run to report")
	}
	var b strings.Builder
	b.WriteString("## The full conformance suite on a `make cluster` cluster\n\n")
	b.WriteString(fullIntro)
	tableHead(&b, "", cols, func(c FullColumn) string { return c.Name })
	row := func(label string, f func(FullColumn) string) { tableRow(&b, label, cols, f) }
	count := func(c FullColumn, r Result) int {
		n := 0
		for _, s := range c.Selected() {
			if s.Result == r {
				n++
			}
		}
		return n
	}
	row("**passed**", func(c FullColumn) string {
		return fmt.Sprintf("**%d of %d**", count(c, Passed), len(c.Selected()))
	})
	row("failed", func(c FullColumn) string { return fmt.Sprint(count(c, Failed)) })
	row("skipped at run time", func(c FullColumn) string { return fmt.Sprint(count(c, Skipped)) })
	for _, phase := range []string{PhaseParallel, PhaseSerial} {
		row(phase+" phase", func(c FullColumn) string {
			for _, p := range c.Phases {
				if p.Phase == phase {
					s := fmt.Sprintf("%d of %d passed in %s", p.Run.Count(Passed), len(p.Run.Selected()), humanDuration(p.Run.Duration))
					switch p.Run.Procs {
					case "":
					case "1":
						s += " (1 process)"
					default:
						s += fmt.Sprintf(" (%s processes)", p.Run.Procs)
					}
					return s
				}
			}
			return "not run"
		})
	}
	row("whole harness (cluster start, image loading, both phases)", func(c FullColumn) string { return orDash(c.Meta.Wall) })
	row("started (UTC)", func(c FullColumn) string {
		if t := c.Phases[0].Run.Started; !t.IsZero() {
			return t.Format("2006-01-02 15:04")
		}
		return "-"
	})
	row("e2e.test", func(c FullColumn) string { return orDash(c.Meta.E2E) })
	row("nodes", func(c FullColumn) string {
		if c.Meta.Microlet == "" {
			return orDash(c.Meta.Node)
		}
		return c.Meta.Node + " " + c.Meta.Microlet
	})
	row("host", func(c FullColumn) string {
		return orDash(strings.Join(nonEmpty(c.Meta.Kernel, c.Meta.Cgroup, c.Meta.Docker), ", "))
	})
	if cols[0].Meta.Command != "" {
		fmt.Fprintf(&b, "\nCommand: `%s`.\n", cols[0].Meta.Command)
	}

	// Per SIG.
	b.WriteString("\n### By SIG\n\n")
	tableHead(&b, "SIG", cols, func(c FullColumn) string { return c.Name + " passed / failed / total" })
	counts := make([]map[string]*sigCount, len(cols))
	sigs := map[string]bool{}
	for i, c := range cols {
		counts[i] = c.bySIG()
		for s := range counts[i] {
			sigs[s] = true
		}
	}
	for _, sig := range sortedKeys(sigs) {
		tableRow(&b, sig, counts, func(m map[string]*sigCount) string {
			n := m[sig]
			if n == nil {
				return "-"
			}
			return fmt.Sprintf("%d / %d / %d", n.passed, n.failed, n.total)
		})
	}

	// Failures, each column's, with the others' result beside.
	for ci, c := range cols {
		var failed []Case
		for _, s := range c.Selected() {
			if s.Result == Failed {
				failed = append(failed, s)
			}
		}
		if len(failed) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n### Failures on %s (full suite)\n\n| spec |", c.Name)
		for oi, o := range cols {
			if oi != ci {
				fmt.Fprintf(&b, " %s |", o.Name)
			}
		}
		b.WriteString(" time | reason (failure message) |\n|---|")
		for oi := range cols {
			if oi != ci {
				b.WriteString("---|")
			}
		}
		b.WriteString("---|---|\n")
		for _, s := range failed {
			fmt.Fprintf(&b, "| %s |", cell(shortName(s.Name), 0))
			for oi, o := range cols {
				if oi == ci {
					continue
				}
				res := "not run"
				for _, oc := range o.Selected() {
					if oc.Name == s.Name {
						res = resultCell(oc.Result)
					}
				}
				fmt.Fprintf(&b, " %s |", res)
			}
			r := reasons.For(s.Name)
			fmt.Fprintf(&b, " %s | %s (%s) — `%s` |\n", humanDuration(s.Duration), cell(r.Reason, 0), ownerCell(r.Owner), cell(firstLine(s.Message), 240))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

const fullIntro = "Every `[Conformance]` spec of e2e.test, run as sonobuoy's certified-conformance mode runs them: " +
	"the parallel phase (focus `" + FullFocus + "`, skip `" + ParallelSkip + "`), then the `[Serial]` phase in one " +
	"process (focus `" + SerialFocus + "`), against a `make cluster` cluster: a control-plane node and two workers, " +
	"each a container on the cluster's own Docker network running containerd, with kube-proxy, CoreDNS and " +
	"metrics-server as pods (docs/cluster.md). `make conformance SUITE=full` runs it and records it in " +
	"`test/conformance/runs/full/`.\n\n"

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
