package nodeshutdown

import (
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/microlet/microlet/internal/config"
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
// microlet's key names (the by-priority list only in the config file, as in
// the kubelet's), and where logind is. Everything zero turns graceful
// shutdown off. podsyncd inlines it in its config.
type Config struct {
	// GracePeriod is shutdownGracePeriod: how long the shutdown is delayed
	// in all.
	GracePeriod time.Duration `yaml:"shutdown_grace_period" flag:"shutdown-grace-period" usage:"how long a node shutdown is delayed so pods can stop (graceful node shutdown through logind); 0 with no shutdown_grace_period_by_pod_priority: off"`
	// GracePeriodCriticalPods is shutdownGracePeriodCriticalPods: the part
	// of GracePeriod kept for critical pods, killed last.
	GracePeriodCriticalPods time.Duration `yaml:"shutdown_grace_period_critical_pods" flag:"shutdown-grace-period-critical-pods" usage:"the part of shutdown_grace_period kept for critical pods, which are stopped last"`
	// ByPodPriority is shutdownGracePeriodByPodPriority; it excludes the
	// two above.
	ByPodPriority []GracePeriodByPriority `yaml:"shutdown_grace_period_by_pod_priority"`
	// LogindDropIn is the drop-in written when logind's
	// InhibitDelayMaxSec is too short (DefaultDropIn).
	LogindDropIn string `yaml:"logind_drop_in" flag:"logind-drop-in" usage:"logind drop-in written when logind's InhibitDelayMaxSec is below the shutdown grace periods (the kubelet's file)"`
	// SystemBusAddress is the D-Bus address of logind's system bus; empty
	// is $DBUS_SYSTEM_BUS_ADDRESS or the default socket.
	SystemBusAddress string `yaml:"system_bus_address" flag:"system-bus-address" usage:"D-Bus address of the system bus where logind is; empty: $DBUS_SYSTEM_BUS_ADDRESS or /var/run/dbus/system_bus_socket"`
}

// Default is graceful shutdown off, with the kubelet's drop-in path.
func Default() Config { return Config{LogindDropIn: DefaultDropIn} }

// Config keys, used in error messages.
const (
	KeyGracePeriod             = "shutdown_grace_period"
	KeyGracePeriodCriticalPods = "shutdown_grace_period_critical_pods"
	KeyByPodPriority           = "shutdown_grace_period_by_pod_priority"
	KeyLogindDropIn            = "logind_drop_in"
)

// Validate applies the kubelet's checks (ValidateKubeletConfiguration with
// both feature gates on), every error naming its key.
func (c Config) Validate() field.ErrorList {
	total, critical, byPriority := field.NewPath(KeyGracePeriod), field.NewPath(KeyGracePeriodCriticalPods), field.NewPath(KeyByPodPriority)
	var errs field.ErrorList
	if c.GracePeriodCriticalPods > c.GracePeriod {
		errs = append(errs, field.Invalid(critical, c.GracePeriodCriticalPods.String(), fmt.Sprintf("must be <= %s (%s)", KeyGracePeriod, c.GracePeriod)))
	}
	if c.GracePeriod < 0 || (c.GracePeriod > 0 && c.GracePeriod < time.Second) {
		errs = append(errs, field.Invalid(total, c.GracePeriod.String(), "must be either zero or otherwise >= 1s"))
	}
	if c.GracePeriodCriticalPods < 0 || (c.GracePeriodCriticalPods > 0 && c.GracePeriodCriticalPods < time.Second) {
		errs = append(errs, field.Invalid(critical, c.GracePeriodCriticalPods.String(), "must be either zero or otherwise >= 1s"))
	}
	if len(c.ByPodPriority) > 0 && (c.GracePeriod > 0 || c.GracePeriodCriticalPods > 0) {
		errs = append(errs, field.Forbidden(byPriority, fmt.Sprintf("cannot be given together with %s or %s", KeyGracePeriod, KeyGracePeriodCriticalPods)))
	}
	// Not checked by the kubelet, but a negative period would shorten the
	// delay asked of logind and fire the group's timer at once.
	for i, p := range c.ByPodPriority {
		errs = append(errs, config.NotNegative(byPriority.Index(i).Child("shutdown_grace_period_seconds"), p.ShutdownGracePeriodSeconds)...)
	}
	// The drop-in is written only when shutdown is on.
	if c.LogindDropIn == "" && len(c.Periods()) > 0 {
		errs = append(errs, field.Required(field.NewPath(KeyLogindDropIn), "graceful shutdown may need to raise logind's delay"))
	}
	return errs
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
