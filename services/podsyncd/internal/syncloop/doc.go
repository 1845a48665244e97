// Package syncloop is podsyncd's heart, the kubelet's syncLoop: it takes the
// desired pods from podconfig, admits new ones, drives one pod worker per pod
// through the runtime (podruntime), reports every pod's status to statusd,
// follows runtime changes through the PLEG, runs housekeeping (orphans
// killed, orphaned statuses dropped) and, every minute, the container
// garbage collector (containergc) with its view of which pods are gone.
package syncloop
