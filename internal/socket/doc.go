// Package socket creates the unix-socket listeners every microlet service serves
// on, in one place: the sun_path length check, refusal to take over a socket a
// live process still answers on, removal of a stale one, a restrictive umask
// around bind, mode 0660 and an optional group.
//
//	lis, err := socket.Listen("/run/microlet/statusd.sock", socket.WithGroup("microlet"))
package socket
