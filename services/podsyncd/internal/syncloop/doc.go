// Package syncloop is podsyncd's heart, the kubelet's syncLoop: it takes the
// desired pods from podconfig, admits new ones, drives one pod worker per pod
// through the runtime (podruntime), reports every pod's status to statusd,
// follows runtime changes through the PLEG, and runs housekeeping (orphans
// killed, orphaned statuses dropped, dead containers collected).
package syncloop
