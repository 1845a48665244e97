package benchvs

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// Ratio is a/b as "0.52×", "–" when either is not positive or missing
// (no ratio to speak of).
func Ratio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || a < 0 || b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// missing is the value of a measure a record does not hold (a record
// older than the measure, or an agent that did not run it); it shows as
// "–".
var missing = math.NaN()

// cell formats v, "–" when missing.
func cell(v float64, format func(float64) string) string {
	if math.IsNaN(v) {
		return "–"
	}
	return format(v)
}

// row is one line of a comparison table: a value per agent.
type row struct {
	label   string
	values  []float64
	format  func(float64) string
	noRatio bool
}

func seconds(v float64) string { return fmt.Sprintf("%.2f s", v) }
func perSec(v float64) string  { return fmt.Sprintf("%.2f", v) }
func cores(v float64) string   { return fmt.Sprintf("%.3f", v) }
func mib(v float64) string     { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }
func perMin(v float64) string  { return fmt.Sprintf("%.1f", v) }
func perPod(v float64) string  { return fmt.Sprintf("%.2f", v) }
func count(v float64) string   { return fmt.Sprintf("%.0f", v) }
func loads(l Load) string      { return fmt.Sprintf("%.2f → %.2f", l.Start, l.End) }

// writeRows writes a Markdown table of rows with a column per agent and,
// for two agents, the first over the second.
func writeRows(w io.Writer, first string, agents []AgentRun, rows []row) {
	head, rule := "| "+first+" |", "|---|"
	for _, a := range agents {
		head += " " + a.Name + " |"
		rule += "---:|"
	}
	if len(agents) == 2 {
		head += " " + agents[0].Name + "/" + agents[1].Name + " |"
		rule += "---:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, r := range rows {
		line := "| " + r.label + " |"
		for _, v := range r.values {
			line += " " + cell(v, r.format) + " |"
		}
		switch {
		case len(r.values) == 2 && r.noRatio:
			line += " |"
		case len(r.values) == 2:
			line += " " + Ratio(r.values[0], r.values[1]) + " |"
		}
		fmt.Fprintln(w, line)
	}
}

// textRow is a row of strings (load averages), without a ratio.
func writeTextRow(w io.Writer, label string, cells []string, ratio bool) {
	line := "| " + label + " |"
	for _, c := range cells {
		line += " " + c + " |"
	}
	if ratio {
		line += " |"
	}
	fmt.Fprintln(w, line)
}

// each collects f of every agent.
func each(agents []AgentRun, f func(AgentRun) float64) []float64 {
	out := make([]float64, len(agents))
	for i, a := range agents {
		out[i] = f(a)
	}
	return out
}

// batchSizes are the batch sizes any agent ran, ascending.
func batchSizes(agents []AgentRun) []int {
	seen := map[int]bool{}
	var out []int
	for _, a := range agents {
		for _, b := range a.Batches {
			if !seen[b.Pods] {
				seen[b.Pods] = true
				out = append(out, b.Pods)
			}
		}
	}
	sort.Ints(out)
	return out
}

func batchOf(a AgentRun, pods int) Batch {
	for _, b := range a.Batches {
		if b.Pods == pods {
			return b
		}
	}
	return Batch{}
}

// WriteTables writes the run's comparison as Markdown tables: pod startup
// and deletion per batch, then the idle and steady-state windows, then API
// requests per minute by verb and resource.
func WriteTables(w io.Writer, r *Record) {
	agents := r.Agents
	fmt.Fprintln(w, "### Pod startup and deletion")
	fmt.Fprintln(w)
	var rows []row
	for _, n := range batchSizes(agents) {
		b := func(a AgentRun) Batch { return batchOf(a, n) }
		p := fmt.Sprintf("%d pods: ", n)
		rows = append(rows,
			row{p + "created → Running p50", each(agents, func(a AgentRun) float64 { return b(a).Running.P50 }), seconds, false},
			row{p + "created → Running p90", each(agents, func(a AgentRun) float64 { return b(a).Running.P90 }), seconds, false},
			row{p + "created → Running p99", each(agents, func(a AgentRun) float64 { return b(a).Running.P99 }), seconds, false},
			row{p + "created → Ready p50", each(agents, func(a AgentRun) float64 { return b(a).Ready.P50 }), seconds, false},
			row{p + "created → Ready p90", each(agents, func(a AgentRun) float64 { return b(a).Ready.P90 }), seconds, false},
			row{p + "created → Ready p99", each(agents, func(a AgentRun) float64 { return b(a).Ready.P99 }), seconds, false},
			row{p + "pods/s to Running", each(agents, func(a AgentRun) float64 { return b(a).PodsPerSecond }), perSec, false},
			row{p + "deleted → gone p50", each(agents, func(a AgentRun) float64 { return b(a).Deleted.P50 }), seconds, false},
			row{p + "deleted → gone p90", each(agents, func(a AgentRun) float64 { return b(a).Deleted.P90 }), seconds, false},
			row{p + "deleted → gone p99", each(agents, func(a AgentRun) float64 { return b(a).Deleted.P99 }), seconds, false},
		)
	}
	writeRows(w, "batch", agents, rows)
	for _, n := range batchSizes(agents) {
		cells := make([]string, len(agents))
		for i, a := range agents {
			cells[i] = loads(batchOf(a, n).Load)
		}
		writeTextRow(w, fmt.Sprintf("%d pods: load average (1 min), start → end", n), cells, len(agents) == 2)
	}
	fmt.Fprintln(w)

	for _, win := range windows(r)[:2] {
		fmt.Fprintf(w, "### %s\n\n", win.title)
		g := func(f func(Window) float64) []float64 {
			return each(agents, func(a AgentRun) float64 { x, _ := win.get(a); return f(x) })
		}
		writeRows(w, "measure", agents, []row{
			{"agent CPU (cores)", g(func(x Window) float64 { return x.AgentCPU }), cores, false},
			{"agent memory (PSS, all its processes, mean)", g(func(x Window) float64 { return x.AgentPSS }), mib, false},
			{"agent memory (PSS, largest sample)", g(func(x Window) float64 { return x.AgentPSSMax }), mib, false},
			{"agent processes", g(func(x Window) float64 { return float64(x.AgentProcs) }), func(v float64) string { return fmt.Sprintf("%.0f", v) }, true},
			{"runtime-shim CPU (cores)", g(func(x Window) float64 { return x.RuntimeCPU }), cores, false},
			{"runtime-shim memory (PSS, mean)", g(func(x Window) float64 { return x.RuntimePSS }), mib, false},
			{"API requests/min (all, less the baseline's)", g(func(x Window) float64 { return net(x, r.Baseline, false) }), perMin, false},
			{"API writes/min (less the baseline's)", g(func(x Window) float64 { return net(x, r.Baseline, true) }), perMin, false},
		})
		cells := make([]string, len(agents))
		for i, a := range agents {
			x, _ := win.get(a)
			cells[i] = loads(x.Load)
		}
		writeTextRow(w, "load average (1 min), start → end", cells, len(agents) == 2)
		fmt.Fprintln(w)
	}

	writeChurn(w, r)

	fmt.Fprintln(w, "### API requests per minute, by verb and resource")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "The baseline is %.0f s with no agent running: the control plane's own requests and the\n", r.Baseline.Seconds)
	fmt.Fprintln(w, "benchmark's two metric scrapes per window, which every agent's window holds as well.")
	fmt.Fprintln(w)
	writeRequests(w, r)
	fmt.Fprintln(w)
	writeCRICalls(w, r)
}

// window is one of an agent's measured windows; get's ok is false when
// the agent's record has no such window.
type window struct {
	title string
	get   func(AgentRun) (Window, bool)
}

// windows are the idle, steady-state and churn windows, in that order.
func windows(r *Record) []window {
	churn := "Churn (not in this run)"
	if r.Settings.ChurnSeconds > 0 {
		churn = fmt.Sprintf("Churn, %g pods/s created for %.0f s, each deleted once Running", r.Settings.ChurnRate, r.Settings.ChurnSeconds)
	}
	return []window{
		{fmt.Sprintf("Idle node, no pods (%.0f s)", r.Settings.IdleSeconds), func(a AgentRun) (Window, bool) { return a.Idle, true }},
		{fmt.Sprintf("Steady state, %d pods Running (%.0f s)", r.Settings.SteadyPods, r.Settings.SteadySeconds), func(a AgentRun) (Window, bool) { return a.Steady, true }},
		{churn, func(a AgentRun) (Window, bool) {
			if a.Churn == nil {
				return Window{}, false
			}
			return a.Churn.Window, true
		}},
	}
}

// writeChurn is the churn table: the pods' startup and deletion, the
// agent's cost over the churn and per pod, and API requests per pod.
func writeChurn(w io.Writer, r *Record) {
	agents := r.Agents
	fmt.Fprintf(w, "### %s\n\n", windows(r)[2].title)
	g := func(f func(c *Churn) float64) []float64 {
		return each(agents, func(a AgentRun) float64 {
			if a.Churn == nil {
				return missing
			}
			return f(a.Churn)
		})
	}
	perPodOf := func(c *Churn, v float64) float64 {
		if c.Pods <= 0 {
			return missing
		}
		return v * c.Window.Seconds / float64(c.Pods)
	}
	writeRows(w, "measure", agents, []row{
		{"pods created", g(func(c *Churn) float64 { return float64(c.Pods) }), count, true},
		{"pods rejected (ended without running)", g(func(c *Churn) float64 { return float64(c.Rejected) }), count, true},
		{"created → Running p50", g(func(c *Churn) float64 { return c.Running.P50 }), seconds, false},
		{"created → Running p90", g(func(c *Churn) float64 { return c.Running.P90 }), seconds, false},
		{"created → Running p99", g(func(c *Churn) float64 { return c.Running.P99 }), seconds, false},
		{"deleted → gone p50", g(func(c *Churn) float64 { return c.Deleted.P50 }), seconds, false},
		{"deleted → gone p99", g(func(c *Churn) float64 { return c.Deleted.P99 }), seconds, false},
		{"first created → last gone", g(func(c *Churn) float64 { return c.Window.Seconds }), seconds, false},
		{"agent CPU (cores, over that span)", g(func(c *Churn) float64 { return c.Window.AgentCPU }), cores, false},
		{"agent CPU seconds per pod", g(func(c *Churn) float64 { return perPodOf(c, c.Window.AgentCPU) }), cores, false},
		{"agent memory (PSS, all its processes, mean)", g(func(c *Churn) float64 { return c.Window.AgentPSS }), mib, false},
		{"agent memory (PSS, largest sample)", g(func(c *Churn) float64 { return c.Window.AgentPSSMax }), mib, false},
		{"runtime-shim CPU (cores)", g(func(c *Churn) float64 { return c.Window.RuntimeCPU }), cores, false},
		{"runtime-shim CPU seconds per pod", g(func(c *Churn) float64 { return perPodOf(c, c.Window.RuntimeCPU) }), cores, false},
		{"API requests per pod (all, less the baseline's)", g(func(c *Churn) float64 { return netPerPod(c, r.Baseline, false) }), perPod, false},
		{"API writes per pod (less the baseline's)", g(func(c *Churn) float64 { return netPerPod(c, r.Baseline, true) }), perPod, false},
	})
	cells := make([]string, len(agents))
	for i, a := range agents {
		cells[i] = "–"
		if a.Churn != nil {
			cells[i] = loads(a.Churn.Window.Load)
		}
	}
	writeTextRow(w, "load average (1 min), start → end", cells, len(agents) == 2)
	fmt.Fprintln(w)

	fmt.Fprintln(w, "#### API requests per pod, by verb and resource")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "All requests over the churn divided by the pods created, the benchmark's own (a create, a")
	fmt.Fprintln(w, "delete and its watch) and the baseline's share included.")
	fmt.Fprintln(w)
	writeByKey(w, "request", agents, func(a AgentRun) map[string]float64 {
		if a.Churn == nil {
			return nil
		}
		return a.Churn.RequestsPerPod
	}, perPod, false)
	fmt.Fprintln(w)
}

// writeCRICalls is a table per window of the CRI calls per minute each
// agent's runtime-shim handled, by method.
func writeCRICalls(w io.Writer, r *Record) {
	fmt.Fprintln(w, "### CRI calls per minute, by method")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "As runtime-shim counted them (`grpc_server_handled_total` of the runtime.v1 services): every")
	fmt.Fprintln(w, "call the agent made, for microlet those of all its services.")
	fmt.Fprintln(w)
	for _, win := range windows(r) {
		fmt.Fprintf(w, "#### %s\n\n", win.title)
		writeByKey(w, "method", r.Agents, func(a AgentRun) map[string]float64 {
			x, ok := win.get(a)
			if !ok {
				return nil
			}
			return x.CRICalls
		}, perMin, true)
		fmt.Fprintln(w)
	}
}

// writeByKey is a table with a row per key of any agent's map (sorted),
// a column per agent and, for two agents, their ratio; with total, a last
// row adds every key up. An agent whose map is nil (not measured) shows
// "–" throughout; a key missing from a map it has is 0.
func writeByKey(w io.Writer, first string, agents []AgentRun, get func(AgentRun) map[string]float64, format func(float64) string, total bool) {
	seen := map[string]bool{}
	for _, a := range agents {
		for k := range get(a) {
			seen[k] = true
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	value := func(k string) func(AgentRun) float64 {
		return func(a AgentRun) float64 {
			m := get(a)
			if m == nil {
				return missing
			}
			if k == "" {
				all, _ := Totals(m)
				return all
			}
			return m[k]
		}
	}
	rows := make([]row, 0, len(keys)+1)
	for _, k := range keys {
		rows = append(rows, row{k, each(agents, value(k)), format, false})
	}
	if total {
		rows = append(rows, row{"total", each(agents, value("")), format, false})
	}
	writeRows(w, first, agents, rows)
}

// net is a window's requests (or writes) per minute less the baseline's,
// to 0.1 per minute (what the table shows, so ratios of noise are not
// drawn) and not below 0.
func net(x, base Window, writes bool) float64 {
	return math.Max(0, math.Round(netRate(x, base, writes)*10)/10)
}

// netPerPod is a churn's requests (or writes) per pod less the baseline's
// share, to 0.01 per pod (what the table shows) and not below 0.
func netPerPod(c *Churn, base Window, writes bool) float64 {
	if c.Pods <= 0 {
		return missing
	}
	d := netRate(c.Window, base, writes) * c.Window.Seconds / 60 / float64(c.Pods)
	return math.Max(0, math.Round(d*100)/100)
}

// netRate is a window's requests (or writes) per minute less the
// baseline's.
func netRate(x, base Window, writes bool) float64 {
	all, wr := Totals(x.Requests)
	ball, bwr := Totals(base.Requests)
	if writes {
		return wr - bwr
	}
	return all - ball
}

// writeRequests is the per-key table: the baseline, then each agent's idle
// and steady windows (raw, baseline included).
func writeRequests(w io.Writer, r *Record) {
	keys := map[string]bool{}
	cols := []map[string]float64{r.Baseline.Requests}
	head, rule := "| request | baseline |", "|---|---:|"
	for _, a := range r.Agents {
		cols = append(cols, a.Idle.Requests, a.Steady.Requests)
		head += " " + a.Name + " idle | " + a.Name + " steady |"
		rule += "---:|---:|"
	}
	for _, c := range cols {
		for k := range c {
			keys[k] = true
		}
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, k := range sorted {
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = perMin(c[k])
		}
		fmt.Fprintf(w, "| %s | %s |\n", k, strings.Join(cells, " | "))
	}
}

// generator names the command that makes the page, inside it.
const generator = "`go run ./test/benchvs/cmd/benchvs report` (run by `make bench-vs-kubelet`)"

// WritePage writes docs/performance.md from r, recorded in source.
func WritePage(w io.Writer, r *Record, source string) {
	fmt.Fprintln(w, "# Performance: microlet and the upstream kubelet, side by side")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "<!-- Generated by %s from %s; do not edit. -->\n\n", generator, source)
	fmt.Fprint(w, pageIntro)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| run | |")
	fmt.Fprintln(w, "|---|---|")
	fmt.Fprintf(w, "| started (UTC) | %s |\n", r.Started.UTC().Format("2006-01-02 15:04"))
	fmt.Fprintf(w, "| command | `%s` |\n", r.Command)
	fmt.Fprintf(w, "| microlet | %s |\n", r.Microlet)
	fmt.Fprintf(w, "| kubelet | %s on runtime-shim %s |\n", r.Kubelet, r.Microlet)
	fmt.Fprintf(w, "| host | %d CPUs, %s, %s, %s |\n", r.Host.CPUs, r.Host.Kernel, r.Host.Cgroup, r.Host.Docker)
	fmt.Fprintln(w, "| microlet node IP | 127.0.0.1 (the e2e tests' node.ConnectedArgs) |")
	fmt.Fprintf(w, "| kubelet node IP | %s |\n", r.KubeletNodeIP)
	churn := ""
	if r.Settings.ChurnSeconds > 0 {
		churn = fmt.Sprintf("; churn %g pods/s for %.0f s", r.Settings.ChurnRate, r.Settings.ChurnSeconds)
	}
	fmt.Fprintf(w, "| pods | `%s`, created at once in batches of %s; steady state %d pods%s |\n",
		r.Settings.Image, joinInts(r.Settings.Batches), r.Settings.SteadyPods, churn)
	fmt.Fprintln(w)
	WriteTables(w, r)
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

// pageIntro is the fixed part of the page: what ran and how to run it.
const pageIntro = `Both node agents measured in one run, one after the other, on one control plane (etcd and
kube-apiserver, ` + "`internal/testenv/controlplane`" + `) and one runtime: microlet's runtime-shim on the
host's Docker Engine. First a microlet node (` + "`internal/testenv/node.Launch`" + `, the node the e2e
tests run, with microlet's defaults), then the upstream kubelet (same release as the control
plane) with runtime-shim started alone as its CRI endpoint (` + "`test/conformance.StartKubelet`" + `, the
configuration of ` + "`make conformance RUNTIME_ONLY=1`" + `). Between the two every pod object is gone
and Docker lists no container of the first agent.

- Run: ` + "`make bench-vs-kubelet`" + ` (` + "`test/benchvs/cmd/benchvs`" + `); the record is kept in
  ` + "`test/benchvs/runs/`" + ` and this page is generated from the newest one.
- Pods are bound to the node by ` + "`spec.nodeName`" + ` (no scheduler), one busybox container from a
  registry on 127.0.0.1, pulled into Docker before each agent starts (` + "`IfNotPresent`" + `), that
  exits on SIGTERM; ` + "`dnsPolicy: Default`" + ` (there is no cluster DNS). Running and Ready are the
  first watch events showing them, timed from each pod's creation request; deletion is from the
  delete request to the watch's deletion event. Each window starts 15 s after what precedes it
  (the node Ready, the steady-state pods Ready), and the benchmark's watch is closed during it.
- CPU and memory come from /proc: the agent is every process of it (microlet's supervisor and
  each service but runtime-shim; the kubelet process), runtime-shim is counted apart. Memory is
  PSS, so shared pages are not counted twice.
- API requests come from the API server's ` + "`apiserver_request_total`" + `, diffed over each window.
  Only one agent runs at a time; the baseline window (no agent) shows what the control plane
  and the benchmark add to every window.
- Churn: pods created at a steady rate (one every 1/rate s) for the churn window, each deleted as
  soon as the watch shows it Running (or ended: an agent may turn pods away while too many are on
  the node); it is measured from the first creation to the last pod gone, with the watch open,
  15 s after the steady-state pods are gone. API requests per pod are all of the span's requests
  over the pods created.
- CRI calls come from the agent's runtime-shim (` + "`--metrics-addr`" + ` on loopback,
  ` + "`grpc_server_handled_total`" + ` of the runtime.v1 services), diffed over each window.
- The machine's load average is shown for every phase: on a shared machine the absolute
  numbers move with it, and only the ratios of phases run under similar load compare.
`
