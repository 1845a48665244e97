package benchvs

import (
	"math"
	"sort"
	"time"

	"github.com/microlet/microlet/internal/testenv"
)

// Latency is a distribution of per-pod latencies, in seconds.
type Latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Percentiles summarises ds by nearest rank: the p-th percentile is the
// smallest value with at least p of the samples at or below it, so with
// few samples p99 is the largest one (no interpolation invents values).
func Percentiles(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		if i < 0 {
			i = 0
		}
		return s[i].Seconds()
	}
	return Latency{N: len(s), P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: s[len(s)-1].Seconds()}
}

// Throughput is pods per second: n pods over the time from the first
// creation request to the last pod seen in the state; 0 when that span is
// not positive.
func Throughput(n int, first, last time.Time) float64 {
	span := last.Sub(first).Seconds()
	if n == 0 || span <= 0 {
		return 0
	}
	return float64(n) / span
}

// requestTotal is the API server's counter of served requests.
const requestTotal = "apiserver_request_total"

// RequestCounts adds up apiserver_request_total by verb and resource
// ("PATCH pods/status", "GET leases"); requests to non-resource URLs
// (/metrics, /healthz) are "GET (non-resource)". Response codes, groups
// and versions are folded together.
func RequestCounts(m testenv.Metrics) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m[requestTotal].GetMetric() {
		var verb, resource, sub string
		for _, lp := range s.GetLabel() {
			switch lp.GetName() {
			case "verb":
				verb = lp.GetValue()
			case "resource":
				resource = lp.GetValue()
			case "subresource":
				sub = lp.GetValue()
			}
		}
		key := verb + " " + resource
		switch {
		case resource == "":
			key = verb + " (non-resource)"
		case sub != "":
			key += "/" + sub
		}
		out[key] += s.GetCounter().GetValue()
	}
	return out
}

// PerMinute is after minus before, per key, scaled to one minute of d;
// keys whose count did not grow are left out.
func PerMinute(before, after map[string]float64, d time.Duration) map[string]float64 {
	out := map[string]float64{}
	if d <= 0 {
		return out
	}
	for k, v := range after {
		if n := v - before[k]; n > 0 {
			out[k] = n * 60 / d.Seconds()
		}
	}
	return out
}

// writeVerbs are the verbs that change state.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true, "DELETECOLLECTION": true, "APPLY": true}

// Totals splits RequestCounts-style keys into all requests and writes.
func Totals(rates map[string]float64) (all, writes float64) {
	for k, v := range rates {
		all += v
		verb := k
		for i := range k {
			if k[i] == ' ' {
				verb = k[:i]
				break
			}
		}
		if writeVerbs[verb] {
			writes += v
		}
	}
	return all, writes
}

// CPUSeconds is the CPU time a set of processes spent between the first
// and the last of samples (each pid's cumulative CPU seconds at one
// instant): for each pid, its last value minus its value in the first
// sample, or all of it when it appeared later (it started during the
// window). A process that exited before the last sample is not counted
// past its last sample.
func CPUSeconds(samples []map[int]float64) float64 {
	if len(samples) < 2 {
		return 0
	}
	first := samples[0]
	last := map[int]float64{}
	for _, s := range samples[1:] {
		for pid, v := range s {
			last[pid] = v
		}
	}
	var total float64
	for pid, v := range last {
		if d := v - first[pid]; d > 0 {
			total += d
		}
	}
	return total
}

// MeanMax are the mean and the largest of xs (0, 0 when empty).
func MeanMax(xs []float64) (mean, largest float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
		largest = math.Max(largest, x)
	}
	return sum / float64(len(xs)), largest
}

// PerPod turns per-minute rates over a window of seconds into counts per
// pod: what each of pods cost. Empty when there were no pods.
func PerPod(perMinute map[string]float64, seconds float64, pods int) map[string]float64 {
	out := map[string]float64{}
	if pods <= 0 {
		return out
	}
	for k, v := range perMinute {
		out[k] = v * seconds / 60 / float64(pods)
	}
	return out
}

// Elapsed is, for each name in both, to's time less from's: the latency of
// the pods that got there (a pod rejected never has a Running time).
func Elapsed(from, to map[string]time.Time) []time.Duration {
	var out []time.Duration
	for name, start := range from {
		if at, ok := to[name]; ok {
			out = append(out, at.Sub(start))
		}
	}
	return out
}
