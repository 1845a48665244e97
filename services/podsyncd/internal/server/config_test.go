package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microlet/microlet/internal/config"
	"github.com/microlet/microlet/services/podsyncd/internal/nodeshutdown"
)

// TestPartsKeys: the parts' own configs, inlined, keep podsyncd's keys and
// flags.
func TestPartsKeys(t *testing.T) {
	file := filepath.Join(t.TempDir(), "podsyncd.yaml")
	body := "resync_period: 3s\ncontainer_gc_period: 2m\nmaximum_dead_containers: 7\ncontainer_log_max_size: 1Mi\n" +
		"container_log_symlink_dir: /tmp/links\nimage_gc_high_threshold_percent: 90\n" +
		"shutdown_grace_period_by_pod_priority: [{priority: 0, shutdown_grace_period_seconds: 20}]\n" +
		"eviction_hard: {memory.available: 1Gi}\neviction_max_pod_grace_period: 30\n"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s := New()
	if err := config.Load("podsyncd", &s.cfg, []string{"--config", file, "--image-gc-period=7m", "--relist-period=2s", "--system-bus-address=unix:path=/tmp/bus", "--eviction-monitoring-period=3s"}); err != nil {
		t.Fatal(err)
	}
	c := s.cfg
	if c.Loop.ResyncPeriod != 3*time.Second || c.Loop.RelistPeriod != 2*time.Second || c.Loop.HousekeepingPeriod != 2*time.Second ||
		c.ContainerGC.Period != 2*time.Minute || c.ContainerGC.MaxDeadContainers != 7 || c.ContainerGC.MaxDeadPerContainer != 1 ||
		c.Logs.MaxSize != "1Mi" || c.Logs.SymlinkDir != "/tmp/links" || c.Logs.MaxFiles != 5 ||
		c.ImageGC.HighThreshold != 90 || c.ImageGC.LowThreshold != 80 || c.ImageGC.Period != 7*time.Minute ||
		len(c.Shutdown.ByPodPriority) != 1 || c.Shutdown.ByPodPriority[0].ShutdownGracePeriodSeconds != 20 ||
		c.Shutdown.SystemBusAddress != "unix:path=/tmp/bus" || c.Shutdown.LogindDropIn != nodeshutdown.DefaultDropIn ||
		c.Eviction.Hard["memory.available"] != "1Gi" || c.Eviction.MaxPodGracePeriod != 30 || c.Eviction.MonitoringPeriod != 3*time.Second ||
		c.Eviction.PressureTransitionPeriod != 5*time.Minute || !c.Eviction.LocalStorageCapacityIsolation {
		t.Fatalf("loaded %+v %+v %+v %+v %+v %+v", c.Loop, c.ContainerGC, c.Logs, c.ImageGC, c.Shutdown, c.Eviction)
	}
}

// TestCompleteReportsEveryError: one Register names every bad setting by
// its key, not just the first.
func TestCompleteReportsEveryError(t *testing.T) {
	c := New().cfg
	if _, err := c.complete(nil); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	c.Loop.ResyncPeriod = 0
	c.ContainerGC.Period = -time.Second
	c.ContainerGC.MinimumContainerTTL = -time.Minute
	c.Logs.MaxSize = "ten"
	c.Logs.MaxFiles = 1
	c.ImageGC.LowThreshold = 95
	c.BackoffMax = time.Second
	c.ClusterDNS = []string{"not-an-ip"}
	c.Eviction.PressureTransitionPeriod = -time.Second
	c.Eviction.Hard = map[string]string{"memory.free": "1Gi"}
	c.PodLogsDir = ""
	c.Shutdown.GracePeriod = 500 * time.Millisecond
	_, err := c.complete(nil)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`resync_period: Invalid value: "0s": must be positive`,
		`container_gc_period: Invalid value: "-1s": must be positive`,
		`minimum_container_ttl_duration: Invalid value: "-1m0s": must not be negative`,
		`container_log_max_size: Invalid value: "ten"`,
		`container_log_max_files: Invalid value: 1: must be greater than 1`,
		`image_gc_low_threshold_percent: Invalid value: 95: must not be above image_gc_high_threshold_percent (85)`,
		`crashloop_backoff_max: Invalid value: "1s": must not be below crashloop_backoff_initial (10s)`,
		`cluster_dns[0] "not-an-ip" is not an IP address`,
		`eviction_pressure_transition_period: Invalid value: "-1s": must not be negative`,
		`eviction_hard:`,
		`pod_logs_dir: Required value`,
		`shutdown_grace_period: Invalid value: "500ms": must be either zero or otherwise >= 1s`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
}
