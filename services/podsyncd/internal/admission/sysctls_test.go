package admission

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
)

func sysctlPod(hostNet, hostIPC bool, names ...string) *corev1.Pod {
	p := &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: hostNet, HostIPC: hostIPC, SecurityContext: &corev1.PodSecurityContext{}}}
	for _, n := range names {
		p.Spec.SecurityContext.Sysctls = append(p.Spec.SecurityContext.Sysctls, corev1.Sysctl{Name: n, Value: "1"})
	}
	return p
}

func TestSysctls(t *testing.T) {
	s, err := NewSysctls([]string{"kernel.msg*", "net.core.somaxconn"}, version.MustParseGeneric("5.10.0"))
	if err != nil {
		t.Fatal(err)
	}
	old, err := NewSysctls(nil, version.MustParseGeneric("4.4.0"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		s       *Sysctls
		pod     *corev1.Pod
		wantMsg string // "" = admitted
	}{
		{"none", s, sysctlPod(false, false), ""},
		{"safe", s, sysctlPod(false, false, "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range"), ""},
		{"safe, slashes", s, sysctlPod(false, false, "net/ipv4/tcp_syncookies"), ""},
		{"allowed unsafe prefix", s, sysctlPod(false, false, "kernel.msgmax"), ""},
		{"allowed unsafe name", s, sysctlPod(false, false, "net.core.somaxconn"), ""},
		{"unsafe", s, sysctlPod(false, false, "kernel.shm_rmid_forced", "kernel.sem"), `forbidden sysctl: "kernel.sem" not allowlisted`},
		{"net sysctl with host network", s, sysctlPod(true, false, "net.core.somaxconn"), `forbidden sysctl: "net.core.somaxconn" not allowed with host Net enabled`},
		{"ipc sysctl with host IPC", s, sysctlPod(false, true, "kernel.shm_rmid_forced"), `forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host IPC enabled`},
		{"kernel-dependent safe sysctl on a new kernel", s, sysctlPod(false, false, "net.ipv4.tcp_rmem"), ""},
		{"kernel-dependent safe sysctl on an old kernel", old, sysctlPod(false, false, "net.ipv4.tcp_rmem"), `forbidden sysctl: "net.ipv4.tcp_rmem" not allowlisted`},
		{"no handler", nil, sysctlPod(false, false, "kernel.sem"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.s.Admit(tc.pod)
			if tc.wantMsg == "" {
				if !r.Admit {
					t.Fatalf("rejected: %+v", r)
				}
				return
			}
			if r.Admit || r.Reason != "SysctlForbidden" || r.Message != tc.wantMsg {
				t.Fatalf("got %+v, want SysctlForbidden %q", r, tc.wantMsg)
			}
		})
	}
}

func TestSysctlsBadPatterns(t *testing.T) {
	for _, p := range []string{"Kernel.Sem", "kernel..sem", "vm.swappiness", "net.*.x", strings.Repeat("a", 254)} {
		if _, err := NewSysctls([]string{p}, nil); err == nil || !strings.Contains(err.Error(), "allowed_unsafe_sysctls") {
			t.Errorf("pattern %q: err %v, want one naming allowed_unsafe_sysctls", p, err)
		}
	}
}
