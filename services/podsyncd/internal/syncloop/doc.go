// Package syncloop is podsyncd's heart, the kubelet's syncLoop: it takes the
// desired pods from podconfig, admits new ones, drives one pod worker per pod
// through the runtime (podruntime), reports every pod's status to statusd,
// follows runtime changes through the PLEG, runs housekeeping (orphans
// killed, orphaned statuses dropped) and, every minute, the container
// garbage collector (containergc) with its view of which pods are gone.
// The failures of that upkeep are said once per change of state (a warning
// when a step starts failing, an info line when it works again) and counted
// in microlet_podsyncd_housekeeping_failures_total{step}.
package syncloop
