package securitycontext

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

func pod(psc *corev1.PodSecurityContext, csc *corev1.SecurityContext) (*corev1.Pod, *corev1.Container) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec:       corev1.PodSpec{SecurityContext: psc, Containers: []corev1.Container{{Name: "c", SecurityContext: csc}}},
	}
	return p, &p.Spec.Containers[0]
}

func val(v *runtimeapi.Int64Value) any {
	if v == nil {
		return nil
	}
	return v.Value
}

func TestContainer(t *testing.T) {
	root := FromImage(nil)
	opts := Options{SeccompProfileRoot: "/var/lib/microlet/seccomp"}
	for _, tc := range []struct {
		name  string
		psc   *corev1.PodSecurityContext
		csc   *corev1.SecurityContext
		image ImageUser
		opts  Options
		check func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext)
	}{
		{"nothing set: image user, unconfined seccomp", nil, nil, FromImage(&runtimeapi.Image{Uid: &runtimeapi.Int64Value{Value: 1000}}), opts,
			func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if val(sc.RunAsUser) != int64(1000) || sc.RunAsGroup != nil || sc.NoNewPrivs || sc.Privileged || sc.ReadonlyRootfs {
					t.Fatalf("%+v", sc)
				}
				if sc.Seccomp.ProfileType != runtimeapi.SecurityProfile_Unconfined {
					t.Fatalf("seccomp %v", sc.Seccomp)
				}
			}},
		{"image user by name", nil, nil, FromImage(&runtimeapi.Image{Username: "nobody"}), opts,
			func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.RunAsUser != nil || sc.RunAsUsername != "nobody" {
					t.Fatalf("%+v", sc)
				}
			}},
		{"pod user and group, container overrides the user",
			&corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](3000)},
			&corev1.SecurityContext{RunAsUser: ptr.To[int64](2000)}, root, opts,
			func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if val(sc.RunAsUser) != int64(2000) || val(sc.RunAsGroup) != int64(3000) || sc.RunAsUsername != "" {
					t.Fatalf("%+v", sc)
				}
			}},
		{"container group overrides the pod's", &corev1.PodSecurityContext{RunAsGroup: ptr.To[int64](3000)},
			&corev1.SecurityContext{RunAsGroup: ptr.To[int64](4000)}, root, opts,
			func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if val(sc.RunAsUser) != int64(0) || val(sc.RunAsGroup) != int64(4000) {
					t.Fatalf("%+v", sc)
				}
			}},
		{"fsGroup first, then supplemental groups",
			&corev1.PodSecurityContext{FSGroup: ptr.To[int64](2000), SupplementalGroups: []int64{5, 6}}, nil, root, opts,
			func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if got := sc.SupplementalGroups; len(got) != 3 || got[0] != 2000 || got[1] != 5 || got[2] != 6 {
					t.Fatalf("groups %v", got)
				}
				if sc.SupplementalGroupsPolicy != runtimeapi.SupplementalGroupsPolicy_Merge {
					t.Fatalf("policy %v", sc.SupplementalGroupsPolicy)
				}
			}},
		{"capabilities, privileged, read-only root, no privilege escalation", nil,
			&corev1.SecurityContext{
				Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}},
				Privileged:               ptr.To(true),
				ReadOnlyRootFilesystem:   ptr.To(true),
				AllowPrivilegeEscalation: ptr.To(false),
			}, root, opts,
			func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if !sc.Privileged || !sc.ReadonlyRootfs || !sc.NoNewPrivs {
					t.Fatalf("%+v", sc)
				}
				if c := sc.Capabilities; len(c.AddCapabilities) != 1 || c.AddCapabilities[0] != "NET_ADMIN" || len(c.DropCapabilities) != 1 || c.DropCapabilities[0] != "ALL" {
					t.Fatalf("caps %+v", c)
				}
			}},
		{"allowPrivilegeEscalation true keeps privileges", nil, &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(true)}, root, opts,
			func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.NoNewPrivs {
					t.Fatal("no_new_privs set")
				}
			}},
		{"node default seccomp", nil, nil, root, Options{SeccompDefault: true},
			func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.Seccomp.ProfileType != runtimeapi.SecurityProfile_RuntimeDefault {
					t.Fatalf("seccomp %v", sc.Seccomp)
				}
			}},
		{"pod seccomp Localhost under the profile root",
			&corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/audit.json")}},
			nil, root, opts,
			func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.Seccomp.ProfileType != runtimeapi.SecurityProfile_Localhost || sc.Seccomp.LocalhostRef != "/var/lib/microlet/seccomp/profiles/audit.json" {
					t.Fatalf("seccomp %v", sc.Seccomp)
				}
			}},
		{"container seccomp wins over the pod's",
			&corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			&corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}, root, Options{SeccompDefault: true},
			func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.Seccomp.ProfileType != runtimeapi.SecurityProfile_Unconfined {
					t.Fatalf("seccomp %v", sc.Seccomp)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, c := pod(tc.psc, tc.csc)
			sc, err := Container(p, c, tc.image, &runtimeapi.NamespaceOption{}, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, sc)
		})
	}
}

func TestContainerErrors(t *testing.T) {
	lh := func(prof *string) *corev1.SecurityContext {
		return &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: prof}}
	}
	policy := corev1.SupplementalGroupsPolicy("Sometimes")
	for _, tc := range []struct {
		name string
		psc  *corev1.PodSecurityContext
		csc  *corev1.SecurityContext
		opts Options
		want string
	}{
		{"Localhost without a profile", nil, lh(nil), Options{SeccompProfileRoot: "/r"}, "localhostProfile must be set"},
		{"Localhost escaping the root", nil, lh(ptr.To("../../etc/x.json")), Options{SeccompProfileRoot: "/r"}, "inside the seccomp profile root"},
		{"Localhost without a root", nil, lh(ptr.To("x.json")), Options{}, "no seccomp profile root"},
		{"unknown supplementalGroupsPolicy", &corev1.PodSecurityContext{SupplementalGroupsPolicy: &policy}, nil, Options{}, "unsupported supplementalGroupsPolicy: Sometimes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, c := pod(tc.psc, tc.csc)
			_, err := Container(p, c, FromImage(nil), nil, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestSandbox(t *testing.T) {
	p, _ := pod(&corev1.PodSecurityContext{
		RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](3000), FSGroup: ptr.To[int64](2000),
		SupplementalGroups: []int64{7}, Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}},
	}, &corev1.SecurityContext{Privileged: ptr.To(true)})
	sc, sysctls := Sandbox(p, &runtimeapi.NamespaceOption{})
	if val(sc.RunAsUser) != int64(1000) || val(sc.RunAsGroup) != int64(3000) || !sc.Privileged ||
		len(sc.SupplementalGroups) != 2 || sc.SupplementalGroups[0] != 2000 || sc.SupplementalGroups[1] != 7 ||
		sc.Seccomp.GetProfileType() != runtimeapi.SecurityProfile_RuntimeDefault {
		t.Fatalf("%+v", sc)
	}
	if sysctls["net.ipv4.ip_unprivileged_port_start"] != "0" {
		t.Fatalf("sysctls %v", sysctls)
	}
}

func TestVerifyNonRoot(t *testing.T) {
	uid := func(v int64) ImageUser { return ImageUser{UID: &v} }
	for _, tc := range []struct {
		name  string
		psc   *corev1.PodSecurityContext
		csc   *corev1.SecurityContext
		image ImageUser
		want  string
	}{
		{"not asked", nil, nil, uid(0), ""},
		{"pod asks, image root", &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}, nil, uid(0), "image will run as root"},
		{"container lifts the pod's rule", &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}, &corev1.SecurityContext{RunAsNonRoot: ptr.To(false)}, uid(0), ""},
		{"runAsUser 0", nil, &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](0)}, uid(1000), "container's runAsUser breaks non-root policy"},
		{"runAsUser non-zero", nil, &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](5)}, uid(0), ""},
		{"image user by name", nil, &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}, ImageUser{Username: "app"}, "image has non-numeric user (app)"},
		{"image uid non-zero", nil, &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}, uid(1000), ""},
		{"image uid out of range", nil, &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}, uid(1 << 40), "invalid user id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, c := pod(tc.psc, tc.csc)
			err := VerifyNonRoot(p, c, tc.image)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want %q", err, tc.want)
			case err != nil && !strings.Contains(err.Error(), `(pod: "p_ns(u)", container: c)`):
				t.Fatalf("message does not name pod and container: %v", err)
			}
		})
	}
}

func TestEffectiveDoesNotAlias(t *testing.T) {
	p, c := pod(&corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1)}, &corev1.SecurityContext{RunAsGroup: ptr.To[int64](2)})
	eff := Effective(p, c)
	*eff.RunAsUser = 99
	*eff.RunAsGroup = 98
	if *p.Spec.SecurityContext.RunAsUser != 1 || *c.SecurityContext.RunAsGroup != 2 {
		t.Fatal("Effective shares pointers with the pod")
	}
}
