package syncloop

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/microlet/microlet/internal/config"
)

// Config is the loop's periods, part of podsyncd's config; podsyncd embeds
// it inline.
type Config struct {
	ResyncPeriod       time.Duration `yaml:"resync_period" flag:"resync-period" usage:"how often every pod is synced even without events"`
	RelistPeriod       time.Duration `yaml:"relist_period" flag:"relist-period" usage:"PLEG relist period"`
	HousekeepingPeriod time.Duration `yaml:"housekeeping_period" flag:"housekeeping-period" usage:"how often orphans are cleaned up"`
}

// Default is the kubelet's periods: a pod resynced every minute (its
// syncFrequency), the runtime relisted every second, housekeeping every
// 2 s. A pod whose runtime state changes is synced at once (relist, the
// runtime's events, a probe's verdict); the resync only catches what no
// event reports, such as a configMap volume's new content. New takes them
// for the Options left zero.
func Default() Config {
	return Config{ResyncPeriod: time.Minute, RelistPeriod: time.Second, HousekeepingPeriod: 2 * time.Second}
}

// Validate requires every period to be positive.
func (c Config) Validate() field.ErrorList {
	errs := config.Positive(field.NewPath("resync_period"), c.ResyncPeriod)
	errs = append(errs, config.Positive(field.NewPath("relist_period"), c.RelistPeriod)...)
	return append(errs, config.Positive(field.NewPath("housekeeping_period"), c.HousekeepingPeriod)...)
}
