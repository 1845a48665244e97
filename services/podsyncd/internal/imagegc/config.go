package imagegc

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/microlet/microlet/internal/config"
)

// Config is image GC's part of podsyncd's config, the kubelet's
// KubeletConfiguration fields under microlet's key names; podsyncd embeds it
// inline.
type Config struct {
	HighThreshold int           `yaml:"image_gc_high_threshold_percent" flag:"image-gc-high-threshold-percent" usage:"image filesystem usage (percent) at or above which unused images are removed; 100 with image_maximum_gc_age 0 turns image GC off"`
	LowThreshold  int           `yaml:"image_gc_low_threshold_percent" flag:"image-gc-low-threshold-percent" usage:"image filesystem usage (percent) image GC frees down to"`
	MinimumAge    time.Duration `yaml:"image_minimum_gc_age" flag:"image-minimum-gc-age" usage:"minimum time since an unused image was first seen before it may be removed"`
	MaximumAge    time.Duration `yaml:"image_maximum_gc_age" flag:"image-maximum-gc-age" usage:"remove images unused for longer than this whatever the disk usage; 0: never"`
	Period        time.Duration `yaml:"image_gc_period" flag:"image-gc-period" usage:"how often image GC runs (the kubelet: 5m)"`
}

// Default is the kubelet's policy, run every five minutes.
func Default() Config {
	p := DefaultPolicy()
	return Config{HighThreshold: p.HighThresholdPercent, LowThreshold: p.LowThresholdPercent,
		MinimumAge: p.MinAge, MaximumAge: p.MaxAge, Period: DefaultPeriod}
}

// Validate names every setting that is out of range.
func (c Config) Validate() field.ErrorList {
	errs := c.Policy().Validate()
	return append(errs, config.Positive(field.NewPath("image_gc_period"), c.Period)...)
}

// Policy is the collection policy the settings give.
func (c Config) Policy() Policy {
	return Policy{HighThresholdPercent: c.HighThreshold, LowThresholdPercent: c.LowThreshold,
		MinAge: c.MinimumAge, MaxAge: c.MaximumAge}
}

// Validate names every setting of p that is out of range, by its config key.
func (p Policy) Validate() field.ErrorList {
	high, low := field.NewPath("image_gc_high_threshold_percent"), field.NewPath("image_gc_low_threshold_percent")
	minAge, maxAge := field.NewPath("image_minimum_gc_age"), field.NewPath("image_maximum_gc_age")
	var errs field.ErrorList
	if p.HighThresholdPercent < 0 || p.HighThresholdPercent > 100 {
		errs = append(errs, field.Invalid(high, p.HighThresholdPercent, "must be within [0, 100]"))
	}
	if p.LowThresholdPercent < 0 || p.LowThresholdPercent > 100 {
		errs = append(errs, field.Invalid(low, p.LowThresholdPercent, "must be within [0, 100]"))
	}
	if p.LowThresholdPercent > p.HighThresholdPercent {
		errs = append(errs, field.Invalid(low, p.LowThresholdPercent, fmt.Sprintf("must not be above %s (%d)", high, p.HighThresholdPercent)))
	}
	errs = append(errs, config.NotNegative(minAge, p.MinAge)...)
	errs = append(errs, config.NotNegative(maxAge, p.MaxAge)...)
	if p.MaxAge > 0 && p.MaxAge < p.MinAge {
		errs = append(errs, field.Invalid(maxAge, p.MaxAge.String(), fmt.Sprintf("must not be below %s (%s)", minAge, p.MinAge)))
	}
	return errs
}
