package main

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
)

// Targets of the issue.
const (
	// writeTolerance is how far writes/s may be from the kubelet's pattern.
	writeTolerance = 0.05
	// memoryFactor is how much more memory per node than kwok is allowed.
	memoryFactor = 1.5
)

// kubeletWrites is the kubelet's pattern: a Lease renewal every 10 s and a
// status report every 5 min per node.
func kubeletWrites(nodes int) float64 { return float64(nodes)/10 + float64(nodes)/300 }

// printTable prints every result, the write breakdown, and per node count
// the comparison of microlet with kwok.
func printTable(out io.Writer, results []result) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "nodes\tagent\tReady\tLeases\twarm-up s\twarm-up CPU-s\twindow s\twrites/s\ttarget/s\tratio\twithin 5%\tCPU-s\tCPU ms/node/s\tRSS avg MiB\tRSS peak MiB\tVmHWM MiB\tRSS KiB/node\tload (start | end)\t")
	for _, r := range results {
		secs := r.window.Seconds()
		ratio := r.writesPerSecond() / kubeletWrites(r.nodes)
		fmt.Fprintf(w, "%d\t%s\t%d\t%d\t%.0f\t%.1f\t%.0f\t%.2f\t%.2f\t%.3f\t%s\t%.1f\t%.3f\t%.0f\t%.0f\t%.0f\t%.0f\t%s | %s\t\n",
			r.nodes, r.agent, r.ready, r.leases, r.warmup.Seconds(), r.warmupCPU, secs, r.writesPerSecond(), kubeletWrites(r.nodes), ratio,
			yesNo(ratio >= 1-writeTolerance && ratio <= 1+writeTolerance), r.cpuSeconds, 1000*r.cpuSeconds/secs/float64(r.nodes),
			mib(r.rssAvg), mib(r.rssPeak), mib(r.hwm), float64(r.rssAvg)/1024/float64(r.nodes), r.load[0], r.load[1])
	}
	_ = w.Flush()
	fmt.Fprintln(out)

	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "nodes\tagent\tresource verb\twrites/s\t")
	for _, r := range results {
		keys := make([]string, 0, len(r.writes))
		for k := range r.writes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "%d\t%s\t%s\t%.3f\t\n", r.nodes, r.agent, k, r.writes[k]/r.window.Seconds())
		}
	}
	_ = w.Flush()
	fmt.Fprintln(out)

	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := false
	for _, m := range results {
		if m.agent != agentMicrolet {
			continue
		}
		for _, k := range results {
			if k.agent != agentKwok || k.nodes != m.nodes {
				continue
			}
			if !header {
				fmt.Fprintln(w, "nodes\tCPU-s microlet\tCPU-s kwok\tCPU <= kwok\tKiB/node microlet\tKiB/node kwok\tratio\tmemory <= 1.5x kwok\t")
				header = true
			}
			mm, km := float64(m.rssAvg)/float64(m.nodes), float64(k.rssAvg)/float64(k.nodes)
			// CPU per second of window, in case the windows differ.
			mc, kc := m.cpuSeconds/m.window.Seconds(), k.cpuSeconds/k.window.Seconds()
			fmt.Fprintf(w, "%d\t%.1f\t%.1f\t%s\t%.0f\t%.0f\t%.2f\t%s\t\n", m.nodes, m.cpuSeconds, k.cpuSeconds, yesNo(mc <= kc),
				mm/1024, km/1024, mm/km, yesNo(mm <= memoryFactor*km))
		}
	}
	_ = w.Flush()
	fmt.Fprintln(out)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}
