// Package systemd holds microlet's systemd units (one .socket and one
// Type=notify .service per service, grouped by microlet.target), the example
// /etc/microlet/microlet.env and install.sh. It has no code: its tests verify
// the units with systemd-analyze and drive the real service binaries through
// socket activation and sd_notify the way systemd does, without systemd.
package systemd
