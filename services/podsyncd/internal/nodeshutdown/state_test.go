package nodeshutdown

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/microlet/microlet/internal/statefile/statefiletest"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
)

// TestCorruptStateQuarantined: a graceful shutdown state file torn by a
// crash or garbled is moved aside with a Warning naming it, the gauges
// stay 0, and the next shutdown stores a new one.
func TestCorruptStateQuarantined(t *testing.T) {
	for name, bad := range map[string]string{
		"torn":    `{"startTime":"2026-11-28T21:00:00Z","endTi`,
		"garbage": "\x00\x00\x00\x00",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, StateFile)
			if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			metrics := kubeletmetrics.New()
			New(Config{GracePeriod: time.Second}, slog.New(slog.NewTextHandler(&log, nil)), WithState(dir, metrics)).restoreMetrics()
			if start, end := shutdownGauges(t, metrics); start != 0 || end != 0 {
				t.Errorf("gauges %v, %v from a corrupt state, want 0", start, end)
			}
			statefiletest.MovedAside(t, path, statefiletest.Want{Content: []byte(bad), Log: &log})
			st := State{StartTime: time.Unix(1000, 0), EndTime: time.Unix(1010, 0)}
			if err := StoreState(path, st); err != nil {
				t.Fatal(err)
			}
			if got, err := LoadState(path); err != nil || !got.StartTime.Equal(st.StartTime) {
				t.Fatalf("state after a new shutdown: %+v, %v", got, err)
			}
		})
	}
}
