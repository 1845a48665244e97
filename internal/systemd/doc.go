// Package systemd lets a microlet service run as a systemd unit: it takes the
// listening socket systemd hands over (socket activation, LISTEN_FDS) and tells
// systemd about its life cycle over NOTIFY_SOCKET (READY=1, WATCHDOG=1,
// STOPPING=1). Both come from github.com/coreos/go-systemd/v22 and do nothing
// when the variables are absent, so the same binary runs under `microlet run`,
// in a container or by hand.
//
// internal/service calls it; a service never does:
//
//	lis, err := systemd.Listener(path)   // nil, nil without LISTEN_FDS
//	n := systemd.NewNotifier(log, check) // nil without NOTIFY_SOCKET
//	env.OnReady(n.Ready)                 // READY=1, then WATCHDOG=1 every WatchdogSec/2
//	defer n.Stopping()                   // STOPPING=1
//
// Why socket activation matters here: systemd owns the socket, so a service
// that crashes, restarts or is replaced by a new build never drops it; clients
// that connect in between wait in the listen backlog instead of failing.
package systemd
