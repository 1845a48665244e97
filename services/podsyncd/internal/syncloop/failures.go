package syncloop

import (
	"context"
	"log/slog"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// step is a recurring piece of the loop's upkeep whose failures are said
// on change and counted: label is its value of the metric's step label,
// what names it in the log.
type step struct{ label, what string }

var (
	stepContainerGC         = step{"container_gc", "container garbage collection"}
	stepListRuntime         = step{"list_runtime", "housekeeping: listing the runtime's pods and containers"}
	stepOrphanedPods        = step{"orphaned_pods", "housekeeping: removing orphaned pods"}
	stepOrphanedPodDirs     = step{"orphaned_pod_dirs", "housekeeping: removing the dirs of pods that are gone"}
	stepOrphanedAllocations = step{"orphaned_allocations", "housekeeping: dropping orphaned allocations"}
	stepOrphanedStatuses    = step{"orphaned_statuses", "housekeeping: dropping orphaned statuses in statusd"}
	stepStatusReport        = step{"status_report", "status report to statusd"}

	allSteps = []step{stepContainerGC, stepListRuntime, stepOrphanedPods, stepOrphanedPodDirs,
		stepOrphanedAllocations, stepOrphanedStatuses, stepStatusReport}
)

// failures says each step's failures once per change of state: a warning
// when it starts failing, an info line when it works again; the failures
// in between are debug lines. Every failure counts in
// microlet_podsyncd_housekeeping_failures_total{step}. A step runs for the
// whole node (subject "") or per pod (the pod's UID), each with its own
// state; a failure while ctx is ending (shutdown) is neither said nor
// counted.
type failures struct {
	log   *slog.Logger
	count *prometheus.CounterVec

	mu      sync.Mutex
	failing map[failureKey]bool
}

type failureKey struct{ label, subject string }

func newFailures(log *slog.Logger, reg prometheus.Registerer) *failures {
	f := &failures{
		log: log,
		count: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "microlet", Subsystem: "podsyncd", Name: "housekeeping_failures_total",
			Help: "Failed runs of the sync loop's upkeep, by step (" + stepLabels() + ").",
		}, []string{"step"}),
		failing: map[failureKey]bool{},
	}
	for _, s := range allSteps {
		f.count.WithLabelValues(s.label)
	}
	if reg != nil {
		reg.MustRegister(f.count)
	}
	return f
}

func stepLabels() string {
	labels := make([]string, len(allSteps))
	for i, s := range allSteps {
		labels[i] = s.label
	}
	return strings.Join(labels, ", ")
}

// observe records one run of s for subject ("" for the node; a pod's UID)
// that ended with err; attrs go on the log lines.
func (f *failures) observe(ctx context.Context, s step, subject string, err error, attrs ...any) {
	if err != nil && ctx.Err() != nil {
		return
	}
	key := failureKey{s.label, subject}
	f.mu.Lock()
	was := f.failing[key]
	if err != nil {
		f.failing[key] = true
	} else {
		delete(f.failing, key)
	}
	f.mu.Unlock()
	switch {
	case err != nil:
		f.count.WithLabelValues(s.label).Inc()
		attrs = append(attrs, "err", err)
		if was {
			f.log.Debug(s.what+" still failing", attrs...)
		} else {
			f.log.Warn(s.what+" failed", attrs...)
		}
	case was:
		f.log.Info(s.what+" works again", attrs...)
	}
}

// forget drops what is known of subject (a pod that is gone), so its
// failures are not remembered for good.
func (f *failures) forget(s step, subject string) {
	f.mu.Lock()
	delete(f.failing, failureKey{s.label, subject})
	f.mu.Unlock()
}
