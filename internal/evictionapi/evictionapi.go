package evictionapi

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Signal is an eviction signal, named as the kubelet names it.
type Signal string

// The signals the kubelet evaluates on Linux (containerfs signals and
// allocatableMemory.available are not offered).
const (
	SignalMemoryAvailable   Signal = "memory.available"
	SignalNodeFsAvailable   Signal = "nodefs.available"
	SignalNodeFsInodesFree  Signal = "nodefs.inodesFree"
	SignalImageFsAvailable  Signal = "imagefs.available"
	SignalImageFsInodesFree Signal = "imagefs.inodesFree"
	SignalPIDAvailable      Signal = "pid.available"
)

// ResourceInodes and ResourcePIDs are the kubelet's names of the resources
// the inode and PID signals starve (they are not API resources).
const (
	ResourceInodes corev1.ResourceName = "inodes"
	ResourcePIDs   corev1.ResourceName = "pids"
)

// Signals lists every signal in a fixed order.
var Signals = []Signal{SignalMemoryAvailable, SignalNodeFsAvailable, SignalNodeFsInodesFree,
	SignalImageFsAvailable, SignalImageFsInodesFree, SignalPIDAvailable}

var signalResource = map[Signal]corev1.ResourceName{
	SignalMemoryAvailable:   corev1.ResourceMemory,
	SignalNodeFsAvailable:   corev1.ResourceEphemeralStorage,
	SignalNodeFsInodesFree:  ResourceInodes,
	SignalImageFsAvailable:  corev1.ResourceEphemeralStorage,
	SignalImageFsInodesFree: ResourceInodes,
	SignalPIDAvailable:      ResourcePIDs,
}

var signalCondition = map[Signal]corev1.NodeConditionType{
	SignalMemoryAvailable:   corev1.NodeMemoryPressure,
	SignalNodeFsAvailable:   corev1.NodeDiskPressure,
	SignalNodeFsInodesFree:  corev1.NodeDiskPressure,
	SignalImageFsAvailable:  corev1.NodeDiskPressure,
	SignalImageFsInodesFree: corev1.NodeDiskPressure,
	SignalPIDAvailable:      corev1.NodePIDPressure,
}

// Valid says whether the kubelet knows the signal.
func (s Signal) Valid() bool { _, ok := signalResource[s]; return ok }

// Resource is the resource the signal starves: memory,
// ephemeral-storage, inodes or pids.
func (s Signal) Resource() corev1.ResourceName { return signalResource[s] }

// Condition is the node condition a crossed signal sets.
func (s Signal) Condition() corev1.NodeConditionType { return signalCondition[s] }

// DefaultEvictionHard is the kubelet's Linux default for evictionHard.
// PIDs have no default threshold.
var DefaultEvictionHard = map[string]string{
	string(SignalMemoryAvailable):   "100Mi",
	string(SignalNodeFsAvailable):   "10%",
	string(SignalNodeFsInodesFree):  "5%",
	string(SignalImageFsAvailable):  "15%",
	string(SignalImageFsInodesFree): "5%",
}

// DefaultPressureTransitionPeriod is the kubelet's
// evictionPressureTransitionPeriod.
const DefaultPressureTransitionPeriod = 5 * time.Minute

// Value is an absolute quantity or a fraction of the signal's capacity.
type Value struct {
	// Quantity is set for absolute values.
	Quantity *resource.Quantity
	// Percentage (0..1) is used when Quantity is nil.
	Percentage float32
}

// Of is the value for a capacity, computed as the kubelet's
// GetThresholdQuantity computes it (capacity × percentage, truncated).
func (v Value) Of(capacity int64) int64 {
	if v.Quantity != nil {
		return v.Quantity.Value()
	}
	return int64(float64(capacity) * float64(v.Percentage))
}

// String is the value as it was written: a quantity or a percentage.
func (v Value) String() string {
	if v.Quantity != nil {
		return v.Quantity.String()
	}
	return strconv.FormatFloat(float64(v.Percentage)*100, 'f', -1, 32) + "%"
}

// Equal compares two values the way the kubelet's compareThresholdValue does.
func (v Value) Equal(o Value) bool {
	if v.Quantity != nil || o.Quantity != nil {
		return v.Quantity != nil && o.Quantity != nil && v.Quantity.Cmp(*o.Quantity) == 0
	}
	return v.Percentage == o.Percentage
}

// Threshold is "signal < value": met when less than Value is available.
type Threshold struct {
	Signal Signal
	Value  Value
	// GracePeriod is how long the threshold must be met before pods are
	// evicted; zero for hard thresholds.
	GracePeriod time.Duration
	// MinReclaim, when set, keeps the threshold met until Value plus
	// MinReclaim is available again.
	MinReclaim *Value
}

// Hard says whether the threshold evicts at once, with no pod grace period.
func (t Threshold) Hard() bool { return t.GracePeriod == 0 }

// Same says whether t and o are the same threshold (the kubelet's hasThreshold).
func (t Threshold) Same(o Threshold) bool {
	return t.Signal == o.Signal && t.GracePeriod == o.GracePeriod && t.Value.Equal(o.Value)
}

// String is for logs.
func (t Threshold) String() string {
	s := fmt.Sprintf("%s<%s", t.Signal, t.Value)
	if !t.Hard() {
		s += " for " + t.GracePeriod.String()
	}
	return s
}

// Config holds the four maps as the kubelet's configuration spells them.
type Config struct {
	Hard            map[string]string
	Soft            map[string]string
	SoftGracePeriod map[string]string
	MinimumReclaim  map[string]string
}

// The configuration keys, used to name the field in errors.
const (
	FieldHard            = "eviction_hard"
	FieldSoft            = "eviction_soft"
	FieldSoftGracePeriod = "eviction_soft_grace_period"
	FieldMinimumReclaim  = "eviction_minimum_reclaim"
)

// Parse turns the maps into thresholds with the kubelet's rules: an unknown
// signal is an error; "0%" and "100%" switch a threshold off; quantities
// must be positive and percentages within 0–100%; every soft threshold needs
// a grace period (not negative); minimum reclaims must be positive
// percentages or non-negative quantities. An error names the field and the
// signal. Hard thresholds come first, then soft ones, each sorted by signal.
func Parse(c Config) ([]Threshold, error) {
	hard, err := parseStatements(FieldHard, c.Hard)
	if err != nil {
		return nil, err
	}
	soft, err := parseStatements(FieldSoft, c.Soft)
	if err != nil {
		return nil, err
	}
	grace := map[Signal]time.Duration{}
	for _, k := range sortedKeys(c.SoftGracePeriod) {
		sig := Signal(k)
		if !sig.Valid() {
			return nil, fmt.Errorf("%s: unsupported eviction signal %q", FieldSoftGracePeriod, k)
		}
		d, err := time.ParseDuration(strings.TrimSpace(c.SoftGracePeriod[k]))
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", FieldSoftGracePeriod, k, err)
		}
		if d < 0 {
			return nil, fmt.Errorf("%s: %s: invalid eviction grace period %s, must be a positive value", FieldSoftGracePeriod, k, d)
		}
		grace[sig] = d
	}
	minReclaim := map[Signal]Value{}
	for _, k := range sortedKeys(c.MinimumReclaim) {
		sig := Signal(k)
		if !sig.Valid() {
			return nil, fmt.Errorf("%s: unsupported eviction signal %q", FieldMinimumReclaim, k)
		}
		v := strings.TrimSpace(c.MinimumReclaim[k])
		if strings.HasSuffix(v, "%") {
			p, err := parsePercentage(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", FieldMinimumReclaim, k, err)
			}
			if p <= 0 {
				return nil, fmt.Errorf("%s: %s: eviction percentage minimum reclaim must be positive: %s", FieldMinimumReclaim, k, v)
			}
			minReclaim[sig] = Value{Percentage: p}
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %q: %w", FieldMinimumReclaim, k, v, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("%s: %s: negative eviction minimum reclaim %s", FieldMinimumReclaim, k, v)
		}
		minReclaim[sig] = Value{Quantity: &q}
	}
	for i := range soft {
		d, ok := grace[soft[i].Signal]
		if !ok {
			return nil, fmt.Errorf("%s: grace period must be specified for the soft eviction threshold %s", FieldSoftGracePeriod, soft[i].Signal)
		}
		soft[i].GracePeriod = d
	}
	out := append(hard, soft...)
	for i := range out {
		if mr, ok := minReclaim[out[i].Signal]; ok {
			out[i].MinReclaim = &mr
		}
	}
	return out, nil
}

func parseStatements(field string, m map[string]string) ([]Threshold, error) {
	var out []Threshold
	for _, k := range sortedKeys(m) {
		sig := Signal(k)
		if !sig.Valid() {
			return nil, fmt.Errorf("%s: unsupported eviction signal %q", field, k)
		}
		v := strings.TrimSpace(m[k])
		if strings.HasSuffix(v, "%") {
			if v == "0%" || v == "100%" {
				continue // the kubelet's way of switching a default off
			}
			p, err := parsePercentage(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", field, k, err)
			}
			if p < 0 || p > 1 {
				return nil, fmt.Errorf("%s: %s: eviction percentage threshold must be within 0%% and 100%%: %s", field, k, v)
			}
			out = append(out, Threshold{Signal: sig, Value: Value{Percentage: p}})
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %q: %w", field, k, v, err)
		}
		if q.Sign() <= 0 {
			return nil, fmt.Errorf("%s: %s: eviction threshold must be positive: %s", field, k, v)
		}
		out = append(out, Threshold{Signal: sig, Value: Value{Quantity: &q}})
	}
	return out, nil
}

func parsePercentage(s string) (float32, error) {
	f, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 32)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("bad percentage %q", s)
	}
	return float32(f) / 100, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Find returns the hard threshold of a signal (what allocatable subtracts).
func Find(ts []Threshold, s Signal) (Threshold, bool) {
	for _, t := range ts {
		if t.Signal == s && t.Hard() {
			return t, true
		}
	}
	return Threshold{}, false
}
