package pressure

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/services/nodestatusd/internal/host"
)

// Signals the kubelet knows and this package measures.
const (
	MemoryAvailable   = "memory.available"
	NodeFsAvailable   = "nodefs.available"
	NodeFsInodesFree  = "nodefs.inodesFree"
	ImageFsAvailable  = "imagefs.available"
	ImageFsInodesFree = "imagefs.inodesFree"
	PIDAvailable      = "pid.available"
)

// DefaultEvictionHard is the kubelet's Linux default for --eviction-hard.
// PIDs have no default threshold there, so PIDPressure stays false unless
// pid.available is configured.
var DefaultEvictionHard = map[string]string{
	MemoryAvailable:   "100Mi",
	NodeFsAvailable:   "10%",
	NodeFsInodesFree:  "5%",
	ImageFsAvailable:  "15%",
	ImageFsInodesFree: "5%",
}

// DefaultTransitionPeriod is the kubelet's --eviction-pressure-transition-period.
const DefaultTransitionPeriod = 5 * time.Minute

// Threshold is "signal < quantity" or "signal < percentage of capacity".
type Threshold struct {
	Signal string
	// Quantity is set for absolute thresholds.
	Quantity *resource.Quantity
	// Percentage (0..1) is set for relative thresholds.
	Percentage float64
}

// Value is the threshold in the signal's unit for a given capacity.
func (t Threshold) Value(capacity int64) int64 {
	if t.Quantity != nil {
		return t.Quantity.Value()
	}
	return int64(math.Round(float64(capacity) * t.Percentage))
}

// ParseThresholds parses the kubelet's map form. An unknown signal, a bad
// quantity or a percentage outside 0–100 is an error naming the signal.
func ParseThresholds(m map[string]string) ([]Threshold, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]Threshold, 0, len(keys))
	for _, k := range keys {
		switch k {
		case MemoryAvailable, NodeFsAvailable, NodeFsInodesFree, ImageFsAvailable, ImageFsInodesFree, PIDAvailable:
		default:
			return nil, fmt.Errorf("eviction threshold %q: unknown signal", k)
		}
		v := strings.TrimSpace(m[k])
		if p, ok := strings.CutSuffix(v, "%"); ok {
			f, err := strconv.ParseFloat(p, 64)
			if err != nil || f < 0 || f > 100 {
				return nil, fmt.Errorf("eviction threshold %q: bad percentage %q", k, v)
			}
			out = append(out, Threshold{Signal: k, Percentage: f / 100})
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() < 0 {
			return nil, fmt.Errorf("eviction threshold %q: bad quantity %q", k, v)
		}
		out = append(out, Threshold{Signal: k, Quantity: &q})
	}
	return out, nil
}

// Find returns the threshold for a signal.
func Find(ts []Threshold, signal string) (Threshold, bool) {
	for _, t := range ts {
		if t.Signal == signal {
			return t, true
		}
	}
	return Threshold{}, false
}

// Conditions says which pressure conditions hold.
type Conditions struct {
	Memory, Disk, PID bool
}

// Monitor remembers when each condition was last observed so the
// transition period can hold it.
type Monitor struct {
	thresholds []Threshold
	period     time.Duration
	clock      clock.PassiveClock

	mu       sync.Mutex
	lastSeen map[string]time.Time // condition name -> last time its signal crossed
}

// NewMonitor returns a Monitor.
func NewMonitor(ts []Threshold, period time.Duration, c clock.PassiveClock) *Monitor {
	return &Monitor{thresholds: ts, period: period, clock: c, lastSeen: map[string]time.Time{}}
}

// Crossed reports which signals are below their threshold in s right now.
func Crossed(ts []Threshold, s host.Stats) []string {
	var out []string
	for _, t := range ts {
		var avail, capacity int64
		switch t.Signal {
		case MemoryAvailable:
			avail, capacity = s.MemoryAvailable, s.MemoryCapacity
		case NodeFsAvailable:
			avail, capacity = clampInt(s.Fs.Available), clampInt(s.Fs.Capacity)
		case NodeFsInodesFree:
			avail, capacity = clampInt(s.Fs.InodeFree), clampInt(s.Fs.Inodes)
		case ImageFsAvailable:
			avail, capacity = clampInt(s.ImageFs.Available), clampInt(s.ImageFs.Capacity)
		case ImageFsInodesFree:
			avail, capacity = clampInt(s.ImageFs.InodeFree), clampInt(s.ImageFs.Inodes)
		case PIDAvailable:
			avail, capacity = s.PIDMax-s.PIDs, s.PIDMax
		}
		if capacity == 0 {
			continue // not measurable here (e.g. a filesystem without inode counts)
		}
		if avail < t.Value(capacity) {
			out = append(out, t.Signal)
		}
	}
	return out
}

// Observe judges s and returns the conditions, held for the transition period.
func (m *Monitor) Observe(s host.Stats) Conditions {
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, sig := range Crossed(m.thresholds, s) {
		m.lastSeen[conditionOf(sig)] = now
	}
	held := func(cond string) bool {
		t, ok := m.lastSeen[cond]
		return ok && now.Sub(t) < m.period || ok && t.Equal(now)
	}
	return Conditions{Memory: held("memory"), Disk: held("disk"), PID: held("pid")}
}

func conditionOf(signal string) string {
	switch signal {
	case MemoryAvailable:
		return "memory"
	case PIDAvailable:
		return "pid"
	default:
		return "disk"
	}
}

func clampInt(u uint64) int64 {
	if u > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(u)
}
