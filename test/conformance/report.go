package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Reason explains why specs fail on microlet: a feature still missing (and
// the issue that owns it) or a limit of the host, named precisely.
type Reason struct {
	// Match is a regular expression on the spec's full name.
	Match string `json:"match"`
	// Reason says what is missing or what limits the host.
	Reason string `json:"reason"`
	// Owner is the issue that owns the fix ("#20") or "host".
	Owner string `json:"owner"`

	re *regexp.Regexp
}

// Reasons is the checked-in mapping (test/conformance/reasons.yaml); the
// first entry whose Match matches a failing spec's name gives its reason.
type Reasons struct {
	Reasons []Reason `json:"reasons"`
}

// LoadReasons reads and compiles a reasons file.
func LoadReasons(path string) (*Reasons, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Reasons
	if err := yaml.UnmarshalStrict(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i := range r.Reasons {
		re, err := regexp.Compile(r.Reasons[i].Match)
		if err != nil {
			return nil, fmt.Errorf("%s: entry %d: %w", path, i+1, err)
		}
		if r.Reasons[i].Reason == "" || r.Reasons[i].Owner == "" {
			return nil, fmt.Errorf("%s: entry %d (%s): reason and owner are required", path, i+1, r.Reasons[i].Match)
		}
		r.Reasons[i].re = re
	}
	return &r, nil
}

// intro is the fixed part of the report: what ran, against what, how to
// run it again.
const intro = `Kubernetes' own end-to-end suite (` + "`e2e.test`" + `, built from ` + "`k8s.io/kubernetes`" + ` at the pinned
version in ` + "`test/conformance/upstream`" + `) run against etcd, kube-apiserver, kube-scheduler and
kube-controller-manager (the same release) with **one microlet node** and nothing else: no
cluster DNS, no kube-proxy, no CNI plugin (pods get runtime-shim's Docker networking). The
node's kubelet API (nodeapi) listens on 127.0.0.1, the node IP the API server dials.

- Run: ` + "`make conformance`" + ` (hack/conformance.sh; ~1 min of setup when the binaries are cached).
  ` + "`FOCUS=... SKIP=... PROCS=...`" + ` pick another selection (written to ` + "`_output/conformance/`" + `).
- This page: ` + "`make conformance-report`" + ` regenerates it from the recorded runs (a run of the
  default selection keeps its junit file, trimmed to the selected specs, in
  ` + "`test/conformance/runs/<node>/`" + `); the reasons come from ` + "`test/conformance/reasons.yaml`" + `.
- Images, built offline under their exact names: agnhost from its source in the module on
  busybox applets, with the host's curl (agnhost:2.55, used by one spec as "the previous
  version", is the same build); nonewprivs from its source; busybox from Debian's
  busybox-static with every applet in /bin and, as /bin/sh, a small switch
  (` + "`test/conformance/cmd/busybox-sh`" + `): busybox's ash, unless the environment holds a name that
  is not a shell identifier, then Debian's bash-static in POSIX mode. Debian's ash exports
  only identifier names, so the envFrom specs' ` + "`sh -c env`" + ` would not print p-data-1 or
  1-data-1 as upstream's image does; bash alone would fail the read-only root spec, which
  compares ash's error message byte for byte. pause from microlet's own pause program;
  nginx as busybox httpd (no selected spec runs it); kitten (the image volume spec's) as
  the agnhost build plus the module's kitten.jpg and data.json. The image volume spec
  pulls kitten with pullPolicy Always: runtime-shim pulls registry.k8s.io images from a
  local registry the harness serves kitten from (` + "`--registry-mirrors`" + `).
  nonroot (the runAsNonRoot spec's) as busybox with ` + "`USER 1234`" + `, as upstream's debian-base
  image; glibc-dns-testing (the hostnameOverride specs') as busybox with the host's glibc
  ` + "`hostname`" + ` (and dig, nslookup, host when bind9-dnsutils is installed), Debian's
  nsswitch.conf and bash-static as /bin/bash.
`

// oneColumn is said when only microlet's run is shown.
const oneColumn = `- The upstream kubelet on runtime-shim (the second column the conformance issue asks
  for) is not in this report: ` + "`make conformance RUNTIME_ONLY=1`" + ` records a run in
  ` + "`test/conformance/runs/kubelet-on-runtime-shim/`" + `, and reports made after it show it beside
  microlet's.
`

// kubeletColumn describes the second column, the upstream kubelet on
// runtime-shim (StartKubelet).
const kubeletColumn = `- Second column: the same selection with the **upstream kubelet** (same release, built from
  the pinned module by ` + "`hack/build-kubelet.sh`" + `) as the only node and microlet's runtime-shim,
  started alone, as its CRI endpoint (` + "`make conformance RUNTIME_ONLY=1`" + `): a spec failing in both
  columns points at runtime-shim (or the host), one failing on microlet only at microlet's
  node services. The kubelet's configuration (` + "`test/conformance/kubelet.go`" + `): Docker's cgroup
  driver under a cgroup root of its own, ` + "`failCgroupV1: false`" + ` (the host is cgroup v1), webhook
  authentication and authorization with the cluster CA as client CA, no static pods, no image
  garbage collection and no disk-pressure eviction (Docker's images are shared with other
  work on the host). The kubelet refuses a loopback node IP, so its node IP, and the one address
  its API listens on, is the host's own (default-route) address. When it starts, the kubelet
  sets kernel parameters (vm.overcommit_memory=1, vm.panic_on_oom=0, kernel.panic=10,
  kernel.panic_on_oops=1, kernel.keys.root_maxkeys, kernel.keys.root_maxbytes); the harness
  records their values before (` + "`sysctls-before`" + ` in the results) and writes them back when the
  run ends.
`

// unknownReason stands for a failure nobody has explained yet.
var unknownReason = Reason{Reason: "unknown: not triaged yet", Owner: "?"}

// For returns the reason of the first entry matching name.
func (r *Reasons) For(name string) Reason {
	if r != nil {
		for _, e := range r.Reasons {
			if e.re.MatchString(name) {
				return e
			}
		}
	}
	return unknownReason
}

// Meta describes a run beyond what its junit file says; the harness writes
// it as meta.json beside the junit file.
type Meta struct {
	// Node is what ran the pods: "microlet" or "kubelet on runtime-shim".
	Node string `json:"node"`
	// E2E is the suite's version (k8s.io/kubernetes' e2e.test).
	E2E string `json:"e2e"`
	// Microlet is microlet's version (git describe).
	Microlet string `json:"microlet,omitempty"`
	// Kernel, Docker and Cgroup describe the host.
	Kernel string `json:"kernel,omitempty"`
	Docker string `json:"docker,omitempty"`
	Cgroup string `json:"cgroup,omitempty"`
	// Procs is the number of parallel Ginkgo processes.
	Procs int `json:"procs"`
	// Command is how the suite was run.
	Command string `json:"command,omitempty"`
	// Wall is the whole harness's time: builds, cluster start, suite.
	Wall string `json:"wall,omitempty"`
}

// LoadMeta reads meta.json; a missing file is no error (a zero Meta).
func LoadMeta(path string) (Meta, error) {
	var m Meta
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return m, nil
	}
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(b, &m)
}

// Column is one run shown in the report: microlet, or the upstream kubelet
// on runtime-shim.
type Column struct {
	Name string
	Run  *Run
	Meta Meta
	// JUnit is the file's path as given, shown in the header.
	JUnit string
}

// Page is a report's fixed text: its title, the paragraphs that say what
// ran and how, and the suite binary's name in the summary table.
type Page struct {
	Title, Intro, Suite string
}

// NodePage is docs/conformance.md's page (e2e.test on one node) for a
// report of n columns.
func NodePage(n int) Page {
	p := Page{Title: "Conformance: Kubernetes' own e2e suite on microlet", Intro: intro + kubeletColumn, Suite: "e2e.test"}
	if n == 1 {
		p.Intro = intro + oneColumn
	}
	return p
}

// E2ENodePage is docs/conformance-e2enode.md's page: the kubelet's own node
// suite (make conformance SUITE=e2enode).
var E2ENodePage = Page{Title: "Node conformance: the kubelet's own e2e_node suite on microlet", Intro: e2eNodeIntro, Suite: "e2e_node.test"}

// e2eNodeIntro says what SUITE=e2enode runs and against what.
const e2eNodeIntro = `The kubelet's own node suite (` + "`e2e_node.test`" + `, ` + "`k8s.io/kubernetes/test/e2e_node`" + ` built from the
pinned module in ` + "`test/conformance/upstream`" + ` by ` + "`hack/build-e2e.sh e2e_node.test`" + `, on first use)
run against **one microlet node**, the cluster's only Node (the suite's setup refuses more), with
etcd, kube-apiserver, kube-scheduler and kube-controller-manager of the same release. Its
` + "`[NodeConformance]`" + ` specs are what upstream's node conformance image runs to validate a node.

- Run: ` + "`make conformance SUITE=e2enode`" + ` (hack/conformance.sh). The suite starts no services of
  its own (` + "`--start-services=false`" + `), pulls nothing (` + "`--prepull-images=false`" + `; the harness
  imports the test images offline, as for e2e.test), reaches the API server with the control
  plane's admin token (` + "`--host`, `--bearer-token`" + `) and reads the node's configuration from
  ` + "`/configz`" + ` at 127.0.0.1:10250, where it expects the kubelet. It does so with
  ` + "`--standalone-mode`" + `, which changes only that (and skips the Node's Ready wait): through the API
  server's node proxy, its default, the API server refuses the node ("address not allowed", 400),
  because it proxies only to global-unicast node addresses and this node's is 127.0.0.1.
- Selection: ` + "`[NodeConformance]`" + ` without ` + "`[Serial]`, `[Disruptive]`, `[Flaky]`, `[Slow]`, `[Feature:…]`" + `,
  and only the specs defined in ` + "`test/e2e_node/`" + ` (Ginkgo ` + "`--focus-file`" + `): the
  ` + "`test/e2e/common`" + ` specs the binary also links are the ones ` + "`make conformance SUITE=nodeconformance`" + `
  runs through e2e.test (docs/conformance-nodeconformance.md). ` + "`FOCUS`, `SKIP`, `FOCUS_FILE`, `SKIP_FILE`" + `
  change it. The counts below are of the specs the focus and skip expressions select; those the
  file filters leave out count as skipped (the command line says which files).
- The node runs from the conformance KubeletConfiguration (` + "`test/conformance/kubelet.go`" + `: kubelet API
  on 127.0.0.1 (port 10250 here), cluster CA as client CA, Docker's cgroup driver under a cgroup root of
  its own, no image GC or disk-pressure eviction), plus what this suite needs: its manifest
  directory as ` + "`staticPodPath`" + ` (the mirror-pod specs write static pods there),
  ` + "`clusterDomain: cluster.local`" + ` (` + "`--dns-domain`" + `, for the FQDN specs) and ` + "`cgroupRoot: /`" + `
  (the cgroup specs look for ` + "`kubepods`, `kubepods/burstable`" + `, … at the root, where the suite's
  own kubelet puts them); pod logs and the container log symlinks in the kubelet's
  ` + "`/var/log/pods`" + ` and ` + "`/var/log/containers`" + ` (the ContainerLogPath specs read them there), from
  which the harness removes what the node's pods left when it stops.
- This page: the run is recorded in ` + "`test/conformance/runs/e2enode/`" + `; the reasons come from
  ` + "`test/conformance/reasons-e2enode.yaml`" + `.
`

// WriteReport writes docs/conformance.md (NodePage): counts and durations
// at the top, the failures grouped by cause, then every selected spec with
// its result in each column and, where the first column failed, the reason
// from reasons.
func WriteReport(w io.Writer, cols []Column, reasons *Reasons, generator string) error {
	return WritePage(w, NodePage(len(cols)), cols, reasons, generator)
}

// WritePage is WriteReport with page's fixed text.
func WritePage(w io.Writer, page Page, cols []Column, reasons *Reasons, generator string) error {
	if len(cols) == 0 {
		return fmt.Errorf("no run to report")
	}
	first := cols[0]
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", page.Title)
	fmt.Fprintf(&b, "<!-- Generated by %s from the junit file of a `make conformance` run; do not edit. -->\n\n", generator)
	b.WriteString(page.Intro)
	b.WriteString("\n")

	// Summary table, one column per run.
	tableHead(&b, "", cols, func(c Column) string { return c.Name })
	row := func(label string, f func(Column) string) { tableRow(&b, label, cols, f) }
	row("**passed**", func(c Column) string {
		return fmt.Sprintf("**%d of %d**", c.Run.Count(Passed), len(c.Run.Selected()))
	})
	row("failed", func(c Column) string { return fmt.Sprint(c.Run.Count(Failed)) })
	row("skipped at run time", func(c Column) string { return fmt.Sprint(c.Run.Count(Skipped)) })
	row("suite run time", func(c Column) string {
		s := humanDuration(c.Run.Duration)
		if c.Run.Procs != "" {
			s += fmt.Sprintf(" (%s parallel processes)", c.Run.Procs)
		}
		return s
	})
	row("whole harness (builds cached, cluster start, suite)", func(c Column) string { return orDash(c.Meta.Wall) })
	row("started (UTC)", func(c Column) string {
		if c.Run.Started.IsZero() {
			return "-"
		}
		return c.Run.Started.Format("2006-01-02 15:04")
	})
	row(page.Suite, func(c Column) string { return orDash(c.Meta.E2E) })
	row("node", func(c Column) string {
		if c.Meta.Microlet == "" {
			return orDash(c.Meta.Node)
		}
		return c.Meta.Node + " " + c.Meta.Microlet
	})
	row("host", func(c Column) string {
		parts := []string{}
		for _, p := range []string{c.Meta.Kernel, c.Meta.Cgroup, c.Meta.Docker} {
			if p != "" {
				parts = append(parts, p)
			}
		}
		return orDash(strings.Join(parts, ", "))
	})
	b.WriteString("\n")
	fmt.Fprintf(&b, "Selection: focus `%s`, skip `%s` (%d specs).\n", strings.Join(first.Run.Focus, "`, `"),
		strings.Join(first.Run.Skip, "`, `"), len(first.Run.Selected()))
	if first.Meta.Command != "" {
		fmt.Fprintf(&b, "Command: `%s`.\n", first.Meta.Command)
	}
	b.WriteString("\n")

	for _, c := range cols {
		if sf := c.Run.SetupFailures(); len(sf) > 0 {
			fmt.Fprintf(&b, "**%s: the suite's own setup failed; results below are not trustworthy.**\n\n", c.Name)
			for _, s := range sf {
				fmt.Fprintf(&b, "- `%s`: %s\n", s.Name, cell(firstLine(s.Message), 300))
			}
			b.WriteString("\n")
		}
	}

	// Failures grouped by cause, for the first column.
	type group struct {
		reason Reason
		specs  []Case
	}
	groups := map[string]*group{}
	var order []string
	for _, c := range first.Run.Selected() {
		if c.Result != Failed {
			continue
		}
		r := reasons.For(c.Name)
		key := r.Owner + "\x00" + r.Reason
		g := groups[key]
		if g == nil {
			g = &group{reason: r}
			groups[key] = g
			order = append(order, key)
		}
		g.specs = append(g.specs, c)
	}
	sort.SliceStable(order, func(i, j int) bool { return len(groups[order[i]].specs) > len(groups[order[j]].specs) })
	if len(order) > 0 {
		fmt.Fprintf(&b, "## Failures on %s by cause\n\n", first.Name)
		b.WriteString("| cause | owner | specs |\n|---|---|---|\n")
		for _, k := range order {
			g := groups[k]
			names := make([]string, len(g.specs))
			for i, s := range g.specs {
				names[i] = shortName(s.Name)
			}
			fmt.Fprintf(&b, "| %s | %s | %d: %s |\n", cell(g.reason.Reason, 0), ownerCell(g.reason.Owner), len(g.specs), cell(strings.Join(names, "; "), 0))
		}
		b.WriteString("\n")
	}

	// The other columns' failures with their messages.
	for _, c := range cols[1:] {
		var failed []Case
		for _, s := range c.Run.Selected() {
			if s.Result == Failed {
				failed = append(failed, s)
			}
		}
		if len(failed) == 0 {
			continue
		}
		fmt.Fprintf(&b, "## Failures on %s\n\n| spec | %s | reason (failure message) |\n|---|---|---|\n", c.Name, first.Name)
		for _, s := range failed {
			other := "not run"
			for _, f := range first.Run.Selected() {
				if f.Name == s.Name {
					other = resultCell(f.Result)
				}
			}
			r := reasons.For(s.Name)
			fmt.Fprintf(&b, "| %s | %s | %s (%s) — `%s` |\n", cell(shortName(s.Name), 0), other, cell(r.Reason, 0), ownerCell(r.Owner), cell(firstLine(s.Message), 240))
		}
		b.WriteString("\n")
	}

	// Every selected spec.
	b.WriteString("## Every selected spec\n\n| spec |")
	for _, c := range cols {
		fmt.Fprintf(&b, " %s |", c.Name)
	}
	b.WriteString(" time | reason (failure message) |\n|---|")
	for range cols {
		b.WriteString("---|")
	}
	b.WriteString("---|---|\n")
	byName := make([]map[string]Case, len(cols))
	names := map[string]bool{}
	for i, c := range cols {
		byName[i] = map[string]Case{}
		for _, s := range c.Run.Selected() {
			byName[i][s.Name] = s
			names[s.Name] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		fmt.Fprintf(&b, "| %s |", cell(n, 0))
		for i := range cols {
			s, ok := byName[i][n]
			if !ok {
				b.WriteString(" not run |")
				continue
			}
			fmt.Fprintf(&b, " %s |", resultCell(s.Result))
		}
		s, ok := byName[0][n]
		detail := ""
		switch {
		case !ok:
		case s.Result == Failed:
			r := reasons.For(n)
			detail = fmt.Sprintf("%s (%s) — `%s`", cell(r.Reason, 0), ownerCell(r.Owner), cell(firstLine(s.Message), 240))
		case s.Result == Skipped:
			detail = "skipped: " + cell(firstLine(s.Message), 240)
		}
		fmt.Fprintf(&b, " %s | %s |\n", humanDuration(s.Duration), detail)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// tableHead writes a Markdown table's header: corner, then one column per
// element of cols, headed by name.
func tableHead[C any](b *strings.Builder, corner string, cols []C, name func(C) string) {
	if corner == "" {
		b.WriteString("| |")
	} else {
		fmt.Fprintf(b, "| %s |", corner)
	}
	for _, c := range cols {
		fmt.Fprintf(b, " %s |", name(c))
	}
	b.WriteString("\n|---|")
	for range cols {
		b.WriteString("---|")
	}
	b.WriteString("\n")
}

// tableRow writes one Markdown table row: label, then cell of each column.
func tableRow[C any](b *strings.Builder, label string, cols []C, cell func(C) string) {
	fmt.Fprintf(b, "| %s |", label)
	for _, c := range cols {
		fmt.Fprintf(b, " %s |", cell(c))
	}
	b.WriteString("\n")
}

func resultCell(r Result) string {
	switch r {
	case Passed:
		return "✅ passed"
	case Failed:
		return "❌ failed"
	default:
		return "⏭ skipped"
	}
}

func ownerCell(owner string) string {
	if owner == "?" {
		return "owner unknown"
	}
	return owner
}

// shortName drops the "[sig-node] " prefix and the conformance tags.
func shortName(n string) string {
	n = strings.TrimPrefix(n, "[sig-node] ")
	for _, tag := range []string{" [NodeConformance]", " [Conformance]"} {
		n = strings.ReplaceAll(n, tag, "")
	}
	return n
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		rest := strings.TrimSpace(s[i+1:])
		s = s[:i]
		// gomega puts the interesting value on the next lines.
		if rest != "" {
			s += " " + strings.Join(strings.Fields(rest), " ")
		}
	}
	return s
}

// cell makes s safe inside a Markdown table cell, cut to max runes (0: no limit).
func cell(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); max > 0 && len(r) > max {
		s = string(r[:max]) + "…"
	}
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "`", "'")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func humanDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%d min %02d s", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return fmt.Sprintf("%d h %02d min", int(d.Hours()), int(d.Minutes())%60)
	}
}
