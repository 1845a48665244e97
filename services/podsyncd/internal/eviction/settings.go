package eviction

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/microlet/microlet/internal/config"
	"github.com/microlet/microlet/internal/evictionapi"
	"github.com/microlet/microlet/internal/stats"
)

// Settings are the eviction manager's part of podsyncd's config, as the
// user writes them: the KubeletConfiguration fields of the same names,
// judged here and nowhere else. podsyncd embeds them inline; Config parses
// them into what New takes.
type Settings struct {
	Hard                          map[string]string `yaml:"eviction_hard" flag:"eviction-hard" usage:"hard eviction thresholds, signal=quantity or percentage (memory.available=100Mi,nodefs.available=10%); unset: the kubelet's defaults; setting it replaces them all (give nodestatusd the same for allocatable)"`
	Soft                          map[string]string `yaml:"eviction_soft" flag:"eviction-soft" usage:"soft eviction thresholds, met for their grace period before pods are evicted"`
	SoftGracePeriod               map[string]string `yaml:"eviction_soft_grace_period" flag:"eviction-soft-grace-period" usage:"grace period of each soft threshold (memory.available=1m30s)"`
	MinimumReclaim                map[string]string `yaml:"eviction_minimum_reclaim" flag:"eviction-minimum-reclaim" usage:"how much more than its threshold must be available again before a signal stops evicting (imagefs.available=2Gi)"`
	MaxPodGracePeriod             int32             `yaml:"eviction_max_pod_grace_period" flag:"eviction-max-pod-grace-period" usage:"largest grace period (seconds) of a pod evicted for a soft threshold"`
	PressureTransitionPeriod      time.Duration     `yaml:"eviction_pressure_transition_period" flag:"eviction-pressure-transition-period" usage:"how long a pressure condition holds after its thresholds cleared"`
	MonitoringPeriod              time.Duration     `yaml:"eviction_monitoring_period" flag:"eviction-monitoring-period" usage:"time between eviction passes (the kubelet's fixed 10s)"`
	LocalStorageCapacityIsolation bool              `yaml:"local_storage_capacity_isolation" flag:"local-storage-capacity-isolation" usage:"evict pods whose emptyDir exceeds its sizeLimit, whose container exceeds its ephemeral-storage limit or whose pod exceeds the sum of them (the kubelet's localStorageCapacityIsolation)"`
	// VolumeStatsAggPeriod is the stats provider's, which the local
	// storage checks read.
	VolumeStatsAggPeriod time.Duration `yaml:"volume_stats_agg_period" flag:"volume-stats-agg-period" usage:"how long a volume's measured disk usage is reused before the directory is walked again"`
}

// DefaultSettings are the kubelet's: its default hard thresholds (Hard
// unset), a 5-minute pressure transition, a pass every 10 s, local
// storage isolation on, volume usage reused for a minute.
func DefaultSettings() Settings {
	return Settings{
		PressureTransitionPeriod:      evictionapi.DefaultPressureTransitionPeriod,
		MonitoringPeriod:              DefaultMonitoringPeriod,
		LocalStorageCapacityIsolation: true,
		VolumeStatsAggPeriod:          stats.DefaultVolumeStatsPeriod,
	}
}

// Validate names every period the manager cannot run with; the thresholds
// are judged by Config, which parses them.
func (s Settings) Validate() field.ErrorList {
	errs := config.Positive(field.NewPath("eviction_monitoring_period"), s.MonitoringPeriod)
	errs = append(errs, config.NotNegative(field.NewPath("eviction_pressure_transition_period"), s.PressureTransitionPeriod)...)
	return append(errs, config.NotNegative(field.NewPath("volume_stats_agg_period"), s.VolumeStatsAggPeriod)...)
}

// Config parses the thresholds (the kubelet's defaults when Hard is unset)
// into the manager's Config; every error names its key.
func (s Settings) Config() (Config, error) {
	hard := s.Hard
	if hard == nil {
		hard = evictionapi.DefaultEvictionHard
	}
	th, err := evictionapi.Parse(evictionapi.Config{Hard: hard, Soft: s.Soft,
		SoftGracePeriod: s.SoftGracePeriod, MinimumReclaim: s.MinimumReclaim})
	if err != nil {
		return Config{}, err
	}
	return Config{Thresholds: th, PressureTransitionPeriod: s.PressureTransitionPeriod,
		MaxPodGracePeriodSeconds: int64(s.MaxPodGracePeriod), MonitoringPeriod: s.MonitoringPeriod,
		LocalStorageCapacityIsolation: s.LocalStorageCapacityIsolation}, nil
}
