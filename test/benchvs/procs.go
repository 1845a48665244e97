package benchvs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/microlet/microlet/internal/procinfo"
)

// processTable is every process's parent and command name (/proc/*/stat).
type processTable struct {
	parent map[int]int
	comm   map[int]string
}

func readProcesses() processTable {
	t := processTable{parent: map[int]int{}, comm: map[int]string{}}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		comm, ppid, ok := parseStat(string(b))
		if ok {
			t.parent[pid], t.comm[pid] = ppid, comm
		}
	}
	return t
}

// parseStat returns the command name and parent pid of a /proc/PID/stat
// line ("12 (runtime-shim) S 7 ..."); the name may hold spaces and
// parentheses, so it ends at the last ')'.
func parseStat(s string) (comm string, ppid int, ok bool) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", 0, false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return "", 0, false
	}
	return s[open+1 : end], ppid, true
}

// tree is root and every process below it, except the subtrees rooted at
// a process for which skip is true.
func (t processTable) tree(root int, skip func(pid int) bool) []int {
	children := map[int][]int{}
	for pid, pp := range t.parent {
		children[pp] = append(children[pp], pid)
	}
	if _, ok := t.parent[root]; !ok {
		return nil
	}
	out, queue := []int{}, []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if pid != root && skip(pid) {
			continue
		}
		out = append(out, pid)
		queue = append(queue, children[pid]...)
	}
	return out
}

// sample is the cumulative CPU seconds and the PSS of each process of a
// group at one instant.
type sample struct {
	cpu map[int]float64
	pss uint64
}

func measure(pids []int) sample {
	s := sample{cpu: map[int]float64{}}
	for _, pid := range pids {
		u, err := procinfo.Of(pid)
		if err != nil {
			continue // exited meanwhile
		}
		s.cpu[pid] = u.CPUSeconds
		s.pss += u.PSS
	}
	return s
}

// groups are the agent's and the runtime's processes now.
type groups func(processTable) (agent, runtime []int)

// byRoots is the groups of an agent whose processes are agentRoot's tree
// without runtime-shim's, and runtime-shim's (runtimeRoot, or when 0 the
// process named runtime-shim below agentRoot: microlet's supervisor runs
// it as one of its services).
func byRoots(agentRoot, runtimeRoot int) groups {
	return func(t processTable) ([]int, []int) {
		isRuntime := func(pid int) bool {
			if runtimeRoot != 0 {
				return pid == runtimeRoot
			}
			return t.comm[pid] == "runtime-shim"
		}
		agent := t.tree(agentRoot, isRuntime)
		var runtime []int
		if runtimeRoot != 0 {
			runtime = t.tree(runtimeRoot, func(int) bool { return false })
		} else {
			for pid, pp := range t.parent {
				if isRuntime(pid) && contains(agent, pp) {
					runtime = append(runtime, t.tree(pid, func(int) bool { return false })...)
				}
			}
		}
		return agent, runtime
	}
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// loadAverage is the one-minute load average (/proc/loadavg), -1 when it
// cannot be read.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}
