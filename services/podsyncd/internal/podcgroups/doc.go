// Package podcgroups is the kubelet's pod-level cgroup management
// (pkg/kubelet/cm's QoS and pod container managers) for podsyncd: the
// hierarchy <root>/kubepods, kubepods/burstable and kubepods/besteffort
// (Guaranteed pods sit directly under kubepods), one cgroup pod<uid> per pod
// with the pod's CPU shares, CFS quota, memory limit and PIDs limit, named
// for the cgroup driver the runtime uses (cgroupfs paths or systemd slices).
// The cgroups themselves are created, updated and removed through
// github.com/opencontainers/cgroups, the library the kubelet uses.
package podcgroups
