package containerlogs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"
)

// BenchmarkRotationPass110Pods is one rotation pass over 330 running
// containers (110 pods of 3) whose logs are below the limit: a status and
// a stat per container, without the CRI round trips.
func BenchmarkRotationPass110Pods(b *testing.B) {
	dir := b.TempDir()
	rt := &fakeRuntime{logs: map[string]string{}, running: map[string]bool{}}
	for i := range 330 {
		id := fmt.Sprintf("c%03d", i)
		p := filepath.Join(dir, id+".log")
		if err := os.WriteFile(p, make([]byte, 4096), 0o640); err != nil {
			b.Fatal(err)
		}
		rt.logs[id], rt.running[id] = p, true
	}
	r := NewRotator(rt, Policy{MaxSize: DefaultMaxSize, MaxFiles: DefaultMaxFiles}, slog.New(slog.DiscardHandler), testclock.NewFakeClock(time.Now()))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.RotateAll(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	if rt.reopens != 0 {
		b.Fatalf("%d rotations; every log is below the limit", rt.reopens)
	}
}
