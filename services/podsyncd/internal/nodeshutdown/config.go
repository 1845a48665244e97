package nodeshutdown

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/microlet/microlet/internal/podutil"
)

// GracePeriodByPriority is one entry of the kubelet's
// shutdownGracePeriodByPodPriority: pods whose priority lies between this
// entry's and the next higher entry's get this many seconds.
type GracePeriodByPriority struct {
	Priority                   int32 `yaml:"priority"`
	ShutdownGracePeriodSeconds int64 `yaml:"shutdown_grace_period_seconds"`
}

// Config is the shutdown configuration, the kubelet's three fields under
// microlet's key names. Everything zero turns graceful shutdown off.
type Config struct {
	// GracePeriod is shutdownGracePeriod (shutdown_grace_period): how long
	// the shutdown is delayed in all.
	GracePeriod time.Duration
	// GracePeriodCriticalPods is shutdownGracePeriodCriticalPods
	// (shutdown_grace_period_critical_pods): the part of GracePeriod kept
	// for critical pods, killed last.
	GracePeriodCriticalPods time.Duration
	// ByPodPriority is shutdownGracePeriodByPodPriority
	// (shutdown_grace_period_by_pod_priority); it excludes the two above.
	ByPodPriority []GracePeriodByPriority
}

// Config keys, used in error messages.
const (
	KeyGracePeriod             = "shutdown_grace_period"
	KeyGracePeriodCriticalPods = "shutdown_grace_period_critical_pods"
	KeyByPodPriority           = "shutdown_grace_period_by_pod_priority"
)

// Validate applies the kubelet's checks (ValidateKubeletConfiguration with
// both feature gates on), each error naming the key.
func (c Config) Validate() error {
	var errs []error
	if c.GracePeriodCriticalPods > c.GracePeriod {
		errs = append(errs, fmt.Errorf("%s (%s) must be <= %s (%s)", KeyGracePeriodCriticalPods, c.GracePeriodCriticalPods, KeyGracePeriod, c.GracePeriod))
	}
	if c.GracePeriod < 0 || (c.GracePeriod > 0 && c.GracePeriod < time.Second) {
		errs = append(errs, fmt.Errorf("%s (%s) must be either zero or otherwise >= 1s", KeyGracePeriod, c.GracePeriod))
	}
	if c.GracePeriodCriticalPods < 0 || (c.GracePeriodCriticalPods > 0 && c.GracePeriodCriticalPods < time.Second) {
		errs = append(errs, fmt.Errorf("%s (%s) must be either zero or otherwise >= 1s", KeyGracePeriodCriticalPods, c.GracePeriodCriticalPods))
	}
	if len(c.ByPodPriority) > 0 && (c.GracePeriod > 0 || c.GracePeriodCriticalPods > 0) {
		errs = append(errs, fmt.Errorf("%s cannot be given together with %s or %s", KeyByPodPriority, KeyGracePeriod, KeyGracePeriodCriticalPods))
	}
	// Not checked by the kubelet, but a negative period would shorten the
	// delay asked of logind and fire the group's timer at once.
	for i, p := range c.ByPodPriority {
		if p.ShutdownGracePeriodSeconds < 0 {
			errs = append(errs, fmt.Errorf("%s[%d].shutdown_grace_period_seconds: %d must not be negative", KeyByPodPriority, i, p.ShutdownGracePeriodSeconds))
		}
	}
	return errors.Join(errs...)
}

// Periods returns the priority groups' grace periods sorted from low to
// high priority, converting the short form as the kubelet's migrateConfig
// does; nil means graceful shutdown is off.
func (c Config) Periods() []GracePeriodByPriority {
	var out []GracePeriodByPriority
	if len(c.ByPodPriority) > 0 {
		out = append(out, c.ByPodPriority...)
	} else {
		out = migrate(c.GracePeriod, c.GracePeriodCriticalPods)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Priority < out[j].Priority })
	return out
}

func migrate(total, critical time.Duration) []GracePeriodByPriority {
	if total == 0 {
		return nil
	}
	normal := total - critical
	if normal < 0 {
		return nil
	}
	return []GracePeriodByPriority{
		{Priority: podutil.DefaultPriority, ShutdownGracePeriodSeconds: int64(normal / time.Second)},
		{Priority: podutil.SystemCriticalPriority, ShutdownGracePeriodSeconds: int64(critical / time.Second)},
	}
}

// Requested is the whole delay the groups need: the sum of their periods,
// what logind's InhibitDelayMaxSec must allow.
func Requested(periods []GracePeriodByPriority) time.Duration {
	var s int64
	for _, p := range periods {
		s += p.ShutdownGracePeriodSeconds
	}
	return time.Duration(s) * time.Second
}
