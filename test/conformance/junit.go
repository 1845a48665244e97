package conformance

import (
	"encoding/xml"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// Result is one spec's outcome.
type Result string

// The outcomes a report distinguishes. Ginkgo's timedout, interrupted,
// aborted and panicked states all count as failed.
const (
	Passed  Result = "passed"
	Failed  Result = "failed"
	Skipped Result = "skipped"
)

// Case is one spec of a run, as the junit file has it.
type Case struct {
	// Name is the spec's full text, without Ginkgo's "[It] " node prefix.
	Name string
	// Result is passed, failed or skipped.
	Result Result
	// State is Ginkgo's own state (passed, failed, timedout, ...).
	State string
	// Duration is how long the spec ran.
	Duration time.Duration
	// Message is the failure message (the "[FAILED] ..." text) or the skip
	// reason; empty for a pass.
	Message string
	// Selected reports whether the run's focus and skip expressions chose
	// the spec; the others are in the file as skipped, never run.
	Selected bool
	// Setup marks suite-level nodes (BeforeSuite, ReportAfterSuite ...).
	Setup bool
}

// Run is a parsed junit report of one e2e.test run.
type Run struct {
	// Cases are every spec and suite node, in file order (sorted by name).
	Cases []Case
	// Started is when the suite began; Duration how long it ran.
	Started  time.Time
	Duration time.Duration
	// Focus and Skip are the expressions the suite ran with.
	Focus, Skip []string
	// Procs is the number of parallel processes.
	Procs string
}

// Selected returns the specs the run's focus and skip chose (no suite nodes).
func (r *Run) Selected() []Case {
	var out []Case
	for _, c := range r.Cases {
		if c.Selected && !c.Setup {
			out = append(out, c)
		}
	}
	return out
}

// Count returns how many selected specs had result res.
func (r *Run) Count(res Result) int {
	n := 0
	for _, c := range r.Selected() {
		if c.Result == res {
			n++
		}
	}
	return n
}

// SetupFailures returns the suite-level nodes that failed: when one did,
// the specs' results cannot be trusted.
func (r *Run) SetupFailures() []Case {
	var out []Case
	for _, c := range r.Cases {
		if c.Setup && c.Result == Failed {
			out = append(out, c)
		}
	}
	return out
}

type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr,omitempty"`
	Tests      int             `xml:"tests,attr"`
	Time       float64         `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr"`
	Properties []junitProperty `xml:"properties>property"`
	Cases      []junitCase     `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name    string        `xml:"name,attr"`
	Status  string        `xml:"status,attr,omitempty"`
	Time    float64       `xml:"time,attr"`
	Skipped *junitMessage `xml:"skipped"`
	Failure *junitMessage `xml:"failure"`
	Error   *junitMessage `xml:"error"`
}

type junitMessage struct {
	Message string `xml:"message,attr,omitempty"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

// leafPrefix is the "[It] " or "[BeforeSuite] " Ginkgo puts before a name.
var leafPrefix = regexp.MustCompile(`^\[(It|[A-Za-z]*Suite[A-Za-z]*|DeferCleanup[^\]]*)\] ?`)

// ParseJUnit reads the junit file e2e.test writes (--report-dir, the file
// junit_01.xml) and classifies every spec by the run's focus and skip.
func ParseJUnit(path string) (*Run, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc junitSuites
	if err := xml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Suites) == 0 {
		return nil, fmt.Errorf("%s: no testsuite", path)
	}
	s := doc.Suites[0]
	run := &Run{Duration: time.Duration(s.Time * float64(time.Second))}
	if t, err := time.Parse("2006-01-02T15:04:05", s.Timestamp); err == nil {
		run.Started = t
	}
	for _, p := range s.Properties {
		switch p.Name {
		case "FocusStrings":
			run.Focus = splitNonEmpty(p.Value)
		case "SkipStrings":
			run.Skip = splitNonEmpty(p.Value)
		case "ParallelTotal":
			run.Procs = p.Value
		}
	}
	focus, err := compileAll(run.Focus)
	if err != nil {
		return nil, fmt.Errorf("%s: focus: %w", path, err)
	}
	skip, err := compileAll(run.Skip)
	if err != nil {
		return nil, fmt.Errorf("%s: skip: %w", path, err)
	}
	for _, jc := range s.Cases {
		m := leafPrefix.FindStringSubmatch(jc.Name)
		c := Case{Name: strings.TrimSpace(leafPrefix.ReplaceAllString(jc.Name, "")), State: jc.Status,
			Duration: time.Duration(jc.Time * float64(time.Second))}
		c.Setup = m != nil && m[1] != "It"
		switch {
		case jc.Failure != nil:
			c.Result, c.Message = Failed, failureText(jc.Failure)
		case jc.Error != nil:
			c.Result, c.Message = Failed, failureText(jc.Error)
		case jc.Skipped != nil:
			c.Result = Skipped
			c.Message = strings.TrimPrefix(strings.TrimPrefix(jc.Skipped.Message, "skipped"), " - ")
		default:
			c.Result = Passed
		}
		c.Selected = c.Setup || (matchesAny(focus, c.Name, true) && !matchesAny(skip, c.Name, false))
		run.Cases = append(run.Cases, c)
	}
	return run, nil
}

// TrimJUnit writes to out the junit file in with only what ParseJUnit
// reports on: the specs the run's focus and skip selected and the suite
// nodes, with their states, times and messages, and the suite's
// properties. e2e.test's own file also lists every unselected spec of the
// suite (~7,500) as skipped; the trimmed one is small enough to keep in
// the repository as a reference run's record.
func TrimJUnit(in, out string) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var doc junitSuites
	if err := xml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	run, err := ParseJUnit(in)
	if err != nil {
		return err
	}
	if len(run.Cases) != len(doc.Suites[0].Cases) {
		return fmt.Errorf("%s: %d cases parsed of %d", in, len(run.Cases), len(doc.Suites[0].Cases))
	}
	s := &doc.Suites[0]
	kept := s.Cases[:0]
	for i, c := range s.Cases {
		if run.Cases[i].Selected {
			kept = append(kept, c)
		}
	}
	s.Cases, s.Tests = kept, len(kept)
	doc.Suites = doc.Suites[:1]
	outB, err := xml.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, append([]byte(xml.Header), append(outB, '\n')...), 0o644)
}

// failureText is the message of a failure: the attribute when e2e.test
// wrote one, else the "[FAILED] ..." paragraph of the description (the
// Kubernetes junit writer leaves the attribute out).
func failureText(m *junitMessage) string {
	if strings.TrimSpace(m.Message) != "" {
		return strings.TrimSpace(m.Message)
	}
	text := m.Text
	if i := strings.Index(text, "[PANICKED]"); i >= 0 {
		// "[PANICKED] Test Panicked", the location, a blank line, then the
		// panic's value: keep the value.
		lines := strings.Split(text[i:], "\n")
		for j := 1; j < len(lines); j++ {
			if l := strings.TrimSpace(lines[j]); l != "" && !strings.HasPrefix(l, "In [") {
				return "[PANICKED] " + l
			}
		}
		return strings.TrimSpace(lines[0])
	}
	if i := strings.Index(text, "[FAILED]"); i >= 0 {
		text = text[i+len("[FAILED]"):]
	} else if i := strings.Index(text, "[TIMEDOUT]"); i >= 0 {
		text = text[i:]
	}
	// The location ("In [It] at: file:line") and stack follow the message.
	if i := strings.Index(text, "\nIn ["); i >= 0 {
		text = text[:i]
	}
	return strings.TrimSpace(text)
}

func splitNonEmpty(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func compileAll(exprs []string) ([]*regexp.Regexp, error) {
	var out []*regexp.Regexp
	for _, e := range exprs {
		re, err := regexp.Compile(e)
		if err != nil {
			return nil, err
		}
		out = append(out, re)
	}
	return out, nil
}

// matchesAny reports whether one expression matches s; with none, empty.
func matchesAny(res []*regexp.Regexp, s string, empty bool) bool {
	if len(res) == 0 {
		return empty
	}
	for _, re := range res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

// MergeJUnit writes to out one junit file holding the testsuite of each of
// ins, in order: the full suite's phases as one result. Each suite keeps
// its own properties (focus, skip, processes), so a reader can tell the
// phases apart; ParseJUnit reads only the first.
func MergeJUnit(out string, ins ...string) error {
	var merged junitSuites
	for _, in := range ins {
		b, err := os.ReadFile(in)
		if err != nil {
			return err
		}
		var doc junitSuites
		if err := xml.Unmarshal(b, &doc); err != nil {
			return fmt.Errorf("%s: %w", in, err)
		}
		merged.Suites = append(merged.Suites, doc.Suites...)
	}
	b, err := xml.MarshalIndent(merged, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, append([]byte(xml.Header), append(b, '\n')...), 0o644)
}
