// Package socket creates the unix-socket listeners every microlet service serves
// on, in one place: the sun_path length check, refusal to take over a socket a
// live process still answers on, removal of a stale one, a restrictive umask
// around bind, mode 0660 and an optional group, and a socket directory that
// nobody else could put a socket of their own into. WithPeers adds a check
// of every peer's credentials (SO_PEERCRED and SO_PEERGROUPS) against the
// users and groups allowed on that socket.
//
//	peers, err := socket.ParsePeers(nil, []string{"microlet-admin"})
//	lis, err := socket.Listen("/run/microlet/runtime.sock", socket.WithGroup("microlet-admin"), socket.WithPeers(peers))
package socket
