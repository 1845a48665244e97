// Package kernelparams records and restores the kernel parameters the
// upstream kubelet sets when it starts (its container manager's kernel
// tunables). A test harness that runs the kubelet on this machine, or in a
// node container that can write /proc/sys, changes them for the whole
// host; it records them first and puts them back afterwards.
package kernelparams
