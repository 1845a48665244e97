package benchvs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Record is one benchmark run: both agents, measured one after the other
// on one control plane, as test/benchvs/runs/<time>.json keeps it.
type Record struct {
	// Started is when the run began (UTC).
	Started time.Time `json:"started"`
	// Command is how the run was made.
	Command string `json:"command"`
	// Microlet is microlet's version (git describe), Kubelet the upstream
	// kubelet's (kubelet --version).
	Microlet string   `json:"microlet"`
	Kubelet  string   `json:"kubelet"`
	Host     Host     `json:"host"`
	Settings Settings `json:"settings"`
	// KubeletNodeIP is the upstream kubelet's node IP, and why.
	KubeletNodeIP string `json:"kubeletNodeIP"`
	// Baseline is an idle window with no agent running: the control
	// plane's own requests and the benchmark's metric scrapes, which every
	// agent's windows contain too.
	Baseline Window `json:"baseline"`
	// Agents are the measured agents in the order they ran.
	Agents []AgentRun `json:"agents"`
}

// Host is the machine the run was made on.
type Host struct {
	Kernel string `json:"kernel"`
	Docker string `json:"docker"`
	Cgroup string `json:"cgroup"`
	CPUs   int    `json:"cpus"`
}

// Settings are the run's sizes.
type Settings struct {
	Batches       []int   `json:"batches"`
	IdleSeconds   float64 `json:"idleSeconds"`
	SteadyPods    int     `json:"steadyPods"`
	SteadySeconds float64 `json:"steadySeconds"`
	// ChurnRate pods per second were created for ChurnSeconds (0: no
	// churn; records older than the churn measurement have neither).
	ChurnRate    float64 `json:"churnRate,omitempty"`
	ChurnSeconds float64 `json:"churnSeconds,omitempty"`
	// Image is the pods' image (present in Docker before each agent starts).
	Image string `json:"image"`
}

// AgentRun is one agent's measurements.
type AgentRun struct {
	// Name is "microlet" or "kubelet".
	Name    string  `json:"name"`
	Batches []Batch `json:"batches"`
	Idle    Window  `json:"idle"`
	Steady  Window  `json:"steady"`
	// Churn is nil when the run had no churn (or predates it).
	Churn *Churn `json:"churn,omitempty"`
	// Leftover is how many of the agent's containers Docker still listed
	// after it was stopped and cleaned up (must be 0 before the next agent).
	Leftover int `json:"leftover"`
}

// Batch is Pods pods created at once, then deleted at once.
type Batch struct {
	Pods int `json:"pods"`
	// Running and Ready are from each pod's creation request to the
	// first watch event showing it Running, or Ready.
	Running Latency `json:"running"`
	Ready   Latency `json:"ready"`
	// PodsPerSecond is Pods over the time from the first creation request
	// to the last pod Running.
	PodsPerSecond float64 `json:"podsPerSecond"`
	// Deleted is from each pod's delete request to the watch's deletion
	// event (the object gone from the API).
	Deleted Latency `json:"deleted"`
	Load    Load    `json:"load"`
}

// Load is the machine's one-minute load average at a phase's start and end.
type Load struct {
	Start float64 `json:"start"`
	End   float64 `json:"end"`
}

// Window is a stretch of time with Pods pods Running.
type Window struct {
	Seconds float64 `json:"seconds"`
	Pods    int     `json:"pods"`
	// AgentCPU is the agent's CPU in cores (CPU seconds over Seconds),
	// every process of it; AgentPSS its summed PSS in bytes, the mean of
	// the samples, and AgentPSSMax the largest sample. Procs is how many
	// processes it had at the end.
	AgentCPU    float64 `json:"agentCPU"`
	AgentPSS    float64 `json:"agentPSS"`
	AgentPSSMax float64 `json:"agentPSSMax"`
	AgentProcs  int     `json:"agentProcs"`
	// RuntimeCPU and RuntimePSS are runtime-shim's, counted apart.
	RuntimeCPU float64 `json:"runtimeCPU"`
	RuntimePSS float64 `json:"runtimePSS"`
	// Requests are API requests per minute by "VERB resource[/sub]"
	// (apiserver_request_total, diffed over the window).
	Requests map[string]float64 `json:"requests"`
	// CRICalls are CRI calls per minute by method, as the agent's
	// runtime-shim handled them (every client of it: for microlet, its
	// services). Nil when not measured: the baseline (no runtime-shim)
	// and records older than the measurement.
	CRICalls map[string]float64 `json:"criCalls"`
	Load     Load               `json:"load"`
}

// Churn is pods created at a steady rate for a while, each deleted as soon
// as a watch shows it Running (or ended without running), then drained.
type Churn struct {
	// Pods were created, Rate a second.
	Pods int     `json:"pods"`
	Rate float64 `json:"rate"`
	// Rejected of them ended (Failed) without having been Running: the
	// agent's admission turned them away (too many pods at once).
	Rejected int `json:"rejected"`
	// Running is from each pod's creation request to the first watch
	// event showing it Running (pods that ran only).
	Running Latency `json:"running"`
	// Deleted is from each pod's delete request to its deletion event.
	Deleted Latency `json:"deleted"`
	// Window spans the first creation request to the last pod gone:
	// the agent's CPU and memory, API requests and CRI calls per minute.
	Window Window `json:"window"`
	// RequestsPerPod are the window's API requests per pod by "VERB
	// resource[/sub]": what one pod's life costs, the benchmark's own
	// create, delete and watch included.
	RequestsPerPod map[string]float64 `json:"requestsPerPod"`
}

// Save writes r as dir/<Started, UTC, 20060102-150405>.json and returns
// the path.
func Save(dir string, r *Record) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, r.Started.UTC().Format("20060102-150405")+".json")
	return path, os.WriteFile(path, append(b, '\n'), 0o644)
}

// Newest is the path of the newest record in dir (the names sort by time).
func Newest(dir string) (string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return "", err
	}
	if len(paths) == 0 {
		return "", fmt.Errorf("no records in %s", dir)
	}
	sort.Strings(paths)
	return paths[len(paths)-1], nil
}

// ReadRecord reads a record.
func ReadRecord(path string) (*Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(r.Agents) == 0 {
		return nil, errors.New(path + ": no agents")
	}
	for _, a := range r.Agents {
		if strings.TrimSpace(a.Name) == "" {
			return nil, errors.New(path + ": an agent without a name")
		}
	}
	return &r, nil
}
