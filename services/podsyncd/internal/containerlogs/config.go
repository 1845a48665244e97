package containerlogs

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/microlet/microlet/internal/config"
)

// Config is log rotation's part of podsyncd's config, the kubelet's
// KubeletConfiguration fields under microlet's key names; podsyncd embeds it
// inline.
type Config struct {
	MaxSize         string        `yaml:"container_log_max_size" flag:"container-log-max-size" usage:"size (a quantity: 10Mi) at which a container's log is rotated; negative turns rotation off"`
	MaxFiles        int           `yaml:"container_log_max_files" flag:"container-log-max-files" usage:"log files (current and rotated) kept per container; at least 2"`
	MaxWorkers      int           `yaml:"container_log_max_workers" flag:"container-log-max-workers" usage:"containers whose logs are rotated at once"`
	MonitorInterval time.Duration `yaml:"container_log_monitor_interval" flag:"container-log-monitor-interval" usage:"how often container log sizes are checked"`
	SymlinkDir      string        `yaml:"container_log_symlink_dir" flag:"container-log-symlink-dir" usage:"directory of the <pod>_<ns>_<container>-<id>.log symlinks to container logs; empty: none"`
}

// Default is the kubelet's settings.
func Default() Config {
	return Config{MaxSize: "10Mi", MaxFiles: DefaultMaxFiles, MaxWorkers: DefaultWorkers,
		MonitorInterval: DefaultMonitorInterval, SymlinkDir: DefaultSymlinkDir}
}

// Validate names every setting that cannot work.
func (c Config) Validate() field.ErrorList {
	_, errs := c.Policy()
	return errs
}

// Policy parses the settings into the rotation policy as the kubelet does
// (the size is a resource quantity), with every error by its config key.
func (c Config) Policy() (Policy, field.ErrorList) {
	var errs field.ErrorList
	p := Policy{MaxFiles: c.MaxFiles, Workers: c.MaxWorkers}
	sizePath := field.NewPath("container_log_max_size")
	if q, err := resource.ParseQuantity(c.MaxSize); err != nil {
		errs = append(errs, field.Invalid(sizePath, c.MaxSize, err.Error()))
	} else if size, ok := q.AsInt64(); !ok {
		errs = append(errs, field.Invalid(sizePath, c.MaxSize, "must be a whole number of bytes"))
	} else {
		p.MaxSize = size
	}
	errs = append(errs, p.Validate()...)
	return p, append(errs, config.Positive(field.NewPath("container_log_monitor_interval"), c.MonitorInterval)...)
}
