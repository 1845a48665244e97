package containergc

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/microlet/microlet/internal/config"
)

// Config is the collector's part of podsyncd's config, under the kubelet's
// flag names; podsyncd embeds it inline.
type Config struct {
	MinimumContainerTTL time.Duration `yaml:"minimum_container_ttl_duration" flag:"minimum-container-ttl-duration" usage:"minimum age of a finished container before it is garbage collected"`
	MaxDeadPerContainer int           `yaml:"maximum_dead_containers_per_container" flag:"maximum-dead-containers-per-container" usage:"dead instances kept per container of a pod (the newest of a pod that exists is always kept); negative: no limit"`
	MaxDeadContainers   int           `yaml:"maximum_dead_containers" flag:"maximum-dead-containers" usage:"dead containers kept on the node in all; negative: no limit"`
	Period              time.Duration `yaml:"container_gc_period" flag:"container-gc-period" usage:"how often dead containers, sandboxes and pod log dirs are collected (the kubelet: 1m)"`
}

// Default is the kubelet's policy, collected every minute.
func Default() Config {
	p := DefaultPolicy()
	return Config{MinimumContainerTTL: p.MinAge, MaxDeadPerContainer: p.MaxPerPodContainer, MaxDeadContainers: p.MaxContainers,
		Period: DefaultPeriod}
}

// Validate names every setting the collector cannot apply.
func (c Config) Validate() field.ErrorList {
	errs := config.NotNegative(field.NewPath("minimum_container_ttl_duration"), c.MinimumContainerTTL)
	return append(errs, config.Positive(field.NewPath("container_gc_period"), c.Period)...)
}

// Policy is the collection policy the settings give.
func (c Config) Policy() Policy {
	return Policy{MinAge: c.MinimumContainerTTL, MaxPerPodContainer: c.MaxDeadPerContainer, MaxContainers: c.MaxDeadContainers}
}
