// Package host reads the facts a node reports about itself from the machine it
// runs on: memory and hugepages from /proc/meminfo and /sys, filesystem size
// and inodes from statfs, process counts against the PID limit, the kernel
// release, the OS image from os-release and the machine, system and boot IDs.
//
// Paths are rooted in a Host value so tests can point it at a fake tree:
//
//	h := host.New()                  // the real machine
//	f, err := h.Facts()              // static facts, read once
//	s, err := h.Stats("/var/lib")    // what pressure is judged on, read every sync
package host
