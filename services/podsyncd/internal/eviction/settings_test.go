package eviction

import (
	"strings"
	"testing"
	"time"

	"github.com/microlet/microlet/internal/config"
)

// settingsErr is what podsyncd says of s at start: the periods Validate
// names, else what parsing the thresholds says.
func settingsErr(s Settings) error {
	if errs := s.Validate(); len(errs) > 0 {
		return config.Join(errs)
	}
	_, err := s.Config()
	return err
}

// TestSettings: the defaults are the kubelet's; set thresholds replace the
// default hard ones; every bad setting is named by its key.
func TestSettings(t *testing.T) {
	c, err := DefaultSettings().Config()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Thresholds) != 5 || c.PressureTransitionPeriod != 5*time.Minute || c.MonitoringPeriod != 10*time.Second || !c.LocalStorageCapacityIsolation {
		t.Fatalf("defaults: %+v", c)
	}
	s := DefaultSettings()
	s.Hard = map[string]string{"memory.available": "1Gi"}
	s.Soft = map[string]string{"nodefs.available": "20%"}
	s.SoftGracePeriod = map[string]string{"nodefs.available": "1m"}
	s.MaxPodGracePeriod = 30
	if c, err = s.Config(); err != nil || len(c.Thresholds) != 2 || c.MaxPodGracePeriodSeconds != 30 {
		t.Fatalf("set: %+v %v (a set eviction_hard replaces the defaults)", c, err)
	}
	for _, tc := range []struct {
		mutate func(*Settings)
		want   string
	}{
		{func(s *Settings) { s.Hard = map[string]string{"memory.free": "1Gi"} }, "eviction_hard:"},
		{func(s *Settings) { s.Soft = map[string]string{"pid.available": "10"} }, "eviction_soft_grace_period:"},
		{func(s *Settings) { s.MinimumReclaim = map[string]string{"nodefs.available": "-1"} }, "eviction_minimum_reclaim:"},
		{func(s *Settings) { s.PressureTransitionPeriod = -time.Second }, "eviction_pressure_transition_period"},
		{func(s *Settings) { s.VolumeStatsAggPeriod = -time.Second }, "volume_stats_agg_period"},
		{func(s *Settings) { s.MonitoringPeriod = 0 }, "eviction_monitoring_period"},
	} {
		s := DefaultSettings()
		tc.mutate(&s)
		if err := settingsErr(s); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("error %v, want one starting %q", err, tc.want)
		}
	}
}
