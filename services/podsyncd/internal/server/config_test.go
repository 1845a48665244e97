package server

import (
	"strings"
	"testing"
	"time"
)

func TestEvictionConfig(t *testing.T) {
	c := New().cfg
	ec, err := c.evictionConfig()
	if err != nil {
		t.Fatal(err)
	}
	if len(ec.Thresholds) != 5 || ec.PressureTransitionPeriod != 5*time.Minute || ec.MonitoringPeriod != 10*time.Second {
		t.Fatalf("defaults: %+v", ec)
	}
	c.EvictionHard = map[string]string{"memory.available": "1Gi"}
	c.EvictionSoft = map[string]string{"nodefs.available": "20%"}
	c.EvictionSoftGracePeriod = map[string]string{"nodefs.available": "1m"}
	c.EvictionMaxPodGracePeriod = 30
	if ec, err = c.evictionConfig(); err != nil || len(ec.Thresholds) != 2 || ec.MaxPodGracePeriodSeconds != 30 {
		t.Fatalf("set: %+v %v (a set eviction_hard replaces the defaults)", ec, err)
	}
	for _, tc := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.EvictionHard = map[string]string{"memory.free": "1Gi"} }, "eviction_hard:"},
		{func(c *Config) { c.EvictionSoft = map[string]string{"pid.available": "10"} }, "eviction_soft_grace_period:"},
		{func(c *Config) { c.EvictionMinimumReclaim = map[string]string{"nodefs.available": "-1"} }, "eviction_minimum_reclaim:"},
		{func(c *Config) { c.EvictionPressureTransitionPeriod = -time.Second }, "eviction_pressure_transition_period"},
		{func(c *Config) { c.VolumeStatsAggPeriod = -time.Second }, "volume_stats_agg_period"},
	} {
		c := New().cfg
		tc.mutate(&c)
		if _, err := c.evictionConfig(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("error %v, want one starting %q", err, tc.want)
		}
	}
}
