package admission

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
)

// SysctlForbiddenReason is the rejection reason of a pod asking for a
// sysctl that is not allowed (the kubelet's sysctl.ForbiddenReason).
const SysctlForbiddenReason = "SysctlForbidden"

// safeSysctls are the kubelet's safe sysctls: namespaced and isolated, so
// always allowed. A non-empty minKernel is the first kernel release that
// namespaces it; on older kernels it is not safe.
var safeSysctls = []struct{ name, minKernel string }{
	{name: "kernel.shm_rmid_forced"},
	{name: "net.ipv4.ip_local_port_range"},
	{name: "net.ipv4.tcp_syncookies"},
	{name: "net.ipv4.ping_group_range"},
	{name: "net.ipv4.ip_unprivileged_port_start"},
	{name: "net.ipv4.ip_local_reserved_ports", minKernel: "3.16"},
	{name: "net.ipv4.tcp_keepalive_time", minKernel: "4.5"},
	{name: "net.ipv4.tcp_fin_timeout", minKernel: "4.6"},
	{name: "net.ipv4.tcp_keepalive_intvl", minKernel: "4.5"},
	{name: "net.ipv4.tcp_keepalive_probes", minKernel: "4.5"},
	{name: "net.ipv4.tcp_rmem", minKernel: "4.15"},
	{name: "net.ipv4.tcp_wmem", minKernel: "4.15"},
}

// sysctlPattern is what an allowed_unsafe_sysctls entry may look like:
// dotted or slashed segments, the last one possibly ending in '*' (the
// API's sysctl pattern), at most 253 characters.
var sysctlPattern = regexp.MustCompile(`^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]$`)

// Sysctls is the kubelet's sysctl admission handler: a pod may set only
// safe sysctls and those allowed by allowed_unsafe_sysctls, and none of
// a namespace it shares with the host (a Net sysctl with hostNetwork, an
// IPC one with hostIPC).
type Sysctls struct {
	exact    map[string]utilsysctl.Namespace
	prefixes map[string]utilsysctl.Namespace
}

// KernelVersion reads the running kernel's release (nil when unreadable:
// the kernel-dependent safe sysctls are then left out, as the kubelet does).
func KernelVersion() *version.Version {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return nil
	}
	v, err := version.ParseGeneric(strings.TrimSpace(string(b)))
	if err != nil {
		return nil
	}
	return v
}

// NewSysctls builds the handler from the safe sysctls available on kernel
// and the allowed unsafe patterns (names, or prefixes ending in '*'). A
// pattern that is malformed or names no namespaced sysctl is an error
// naming it.
func NewSysctls(allowedUnsafe []string, kernel *version.Version) (*Sysctls, error) {
	s := &Sysctls{exact: map[string]utilsysctl.Namespace{}, prefixes: map[string]utilsysctl.Namespace{}}
	var patterns []string
	for _, sc := range safeSysctls {
		if sc.minKernel == "" || (kernel != nil && kernel.AtLeast(version.MustParseGeneric(sc.minKernel))) {
			patterns = append(patterns, sc.name)
		}
	}
	for _, p := range append(patterns, allowedUnsafe...) {
		if len(p) > 253 || !sysctlPattern.MatchString(p) {
			return nil, fmt.Errorf("allowed_unsafe_sysctls: %q must have at most 253 characters and be a sysctl name, optionally ending in '*'", p)
		}
		ns, nameOrPrefix, prefixed := utilsysctl.GetNamespace(p)
		if ns == utilsysctl.UnknownNamespace {
			return nil, fmt.Errorf("allowed_unsafe_sysctls: %q is not known to be namespaced (only kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.* and net.* are)", p)
		}
		if prefixed {
			s.prefixes[nameOrPrefix] = ns
		} else {
			s.exact[nameOrPrefix] = ns
		}
	}
	return s, nil
}

// Admit refuses a pod with a sysctl that is not allowed, with the
// kubelet's reason and message.
func (s *Sysctls) Admit(pod *corev1.Pod) Result {
	if s == nil || pod.Spec.SecurityContext == nil {
		return Result{Admit: true}
	}
	for _, sc := range pod.Spec.SecurityContext.Sysctls {
		if err := s.check(sc.Name, pod.Spec.HostNetwork, pod.Spec.HostIPC); err != nil {
			return Result{Reason: SysctlForbiddenReason, Message: fmt.Sprintf("forbidden sysctl: %v", err)}
		}
	}
	return Result{Admit: true}
}

func (s *Sysctls) check(name string, hostNet, hostIPC bool) error {
	name = utilsysctl.NormalizeName(name)
	ns, found := s.exact[name]
	if !found {
		for p, pns := range s.prefixes {
			if strings.HasPrefix(name, p) {
				ns, found = pns, true
				break
			}
		}
	}
	switch {
	case !found:
		return fmt.Errorf("%q not allowlisted", name)
	case ns == utilsysctl.IPCNamespace && hostIPC, ns == utilsysctl.NetNamespace && hostNet:
		return fmt.Errorf("%q not allowed with host %s enabled", name, ns)
	}
	return nil
}
