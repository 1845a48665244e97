package admission

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeHost is a host whose AppArmor support the test decides.
type fakeHost struct {
	err   error
	calls int
}

func (h *fakeHost) AppArmorSupport() error {
	h.calls++
	return h.err
}

func profile(t corev1.AppArmorProfileType) *corev1.AppArmorProfile {
	return &corev1.AppArmorProfile{Type: t}
}

func localhost(name string) *corev1.AppArmorProfile {
	return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}
}

// aaPod is a pending pod with one init, one app and one ephemeral
// container; edit changes it.
func aaPod(edit func(p *corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init"}},
			Containers:     []corev1.Container{{Name: "app"}},
			EphemeralContainers: []corev1.EphemeralContainer{{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug"},
			}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	if edit != nil {
		edit(p)
	}
	return p
}

func podProfile(pr *corev1.AppArmorProfile) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: pr} }
}

func containerProfile(pick func(p *corev1.Pod) *corev1.Container, pr *corev1.AppArmorProfile) func(*corev1.Pod) {
	return func(p *corev1.Pod) { pick(p).SecurityContext = &corev1.SecurityContext{AppArmorProfile: pr} }
}

func initC(p *corev1.Pod) *corev1.Container { return &p.Spec.InitContainers[0] }
func appC(p *corev1.Pod) *corev1.Container  { return &p.Spec.Containers[0] }
func ephC(p *corev1.Pod) *corev1.Container {
	return (*corev1.Container)(&p.Spec.EphemeralContainers[0].EphemeralContainerCommon)
}

func annotation(container, value string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + container: value}
	}
}

func TestAppArmorAdmit(t *testing.T) {
	const off = "Cannot enforce AppArmor: AppArmor is not enabled on the host"
	const emptyApp = `Cannot enforce AppArmor: container "app" asks for a Localhost AppArmor profile with an empty name`
	tests := []struct {
		name string
		pod  *corev1.Pod
		// wantOff and wantOn are the rejection messages on a host without
		// and with AppArmor; "" admits.
		wantOff, wantOn string
	}{
		{"no profile", aaPod(nil), "", ""},
		{"pod RuntimeDefault", aaPod(podProfile(profile(corev1.AppArmorProfileTypeRuntimeDefault))), off, ""},
		{"pod Localhost", aaPod(podProfile(localhost("k8s-x"))), off, ""},
		{"pod Unconfined", aaPod(podProfile(profile(corev1.AppArmorProfileTypeUnconfined))), "", ""},
		{"app container RuntimeDefault", aaPod(containerProfile(appC, profile(corev1.AppArmorProfileTypeRuntimeDefault))), off, ""},
		{"init container Localhost", aaPod(containerProfile(initC, localhost("k8s-x"))), off, ""},
		{"ephemeral container RuntimeDefault", aaPod(containerProfile(ephC, profile(corev1.AppArmorProfileTypeRuntimeDefault))), off, ""},
		{"container Unconfined", aaPod(containerProfile(appC, profile(corev1.AppArmorProfileTypeUnconfined))), "", ""},
		{"annotation runtime/default", aaPod(annotation("app", corev1.DeprecatedAppArmorBetaProfileRuntimeDefault)), off, ""},
		{"annotation localhost/", aaPod(annotation("app", corev1.DeprecatedAppArmorBetaProfileNamePrefix+"k8s-x")), off, ""},
		{"annotation unconfined", aaPod(annotation("app", corev1.DeprecatedAppArmorBetaProfileNameUnconfined)), "", ""},
		{"container Localhost without a name", aaPod(containerProfile(appC, localhost(" "))), off, emptyApp},
		{"annotation localhost/ without a name", aaPod(annotation("app", corev1.DeprecatedAppArmorBetaProfileNamePrefix)), off, emptyApp},
		{"pod Localhost without a name, container's own profile wins", aaPod(func(p *corev1.Pod) {
			podProfile(localhost(""))(p)
			for _, pick := range []func(*corev1.Pod) *corev1.Container{initC, appC, ephC} {
				containerProfile(pick, profile(corev1.AppArmorProfileTypeRuntimeDefault))(p)
			}
		}), off, ""},
		{"running pod is not checked again", aaPod(func(p *corev1.Pod) {
			podProfile(profile(corev1.AppArmorProfileTypeRuntimeDefault))(p)
			p.Status.Phase = corev1.PodRunning
		}), "", ""},
	}
	hostOff := &fakeHost{err: errors.New("AppArmor is not enabled on the host")}
	disabled, enabled := NewAppArmor(hostOff), NewAppArmor(&fakeHost{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, c := range []struct {
				h    *AppArmor
				host string
				want string
			}{{disabled, "without AppArmor", tt.wantOff}, {enabled, "with AppArmor", tt.wantOn}} {
				r := c.h.Admit(tt.pod)
				switch {
				case c.want == "" && !r.Admit:
					t.Errorf("%s: refused (%s: %s), want admitted", c.host, r.Reason, r.Message)
				case c.want != "" && (r.Admit || r.Reason != AppArmorReason || r.Message != c.want):
					t.Errorf("%s: got %+v, want refused with %s: %q", c.host, r, AppArmorReason, c.want)
				}
			}
		})
	}
	if hostOff.calls != 1 {
		t.Errorf("the host was asked %d times, want once (at start)", hostOff.calls)
	}
	var none *AppArmor
	if r := none.Admit(aaPod(podProfile(profile(corev1.AppArmorProfileTypeRuntimeDefault)))); !r.Admit {
		t.Errorf("nil handler refused: %+v", r)
	}
}

func TestAppArmorSupport(t *testing.T) {
	dir := t.TempDir()
	fs := filepath.Join(dir, "securityfs")
	param := filepath.Join(dir, "enabled")
	write := func(s string) {
		if err := os.WriteFile(param, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("Y\n")
	if err := appArmorSupport(fs, param); err == nil {
		t.Error("no securityfs directory: supported, want not")
	}
	if err := os.Mkdir(fs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := appArmorSupport(fs, param); err != nil {
		t.Errorf("securityfs and enabled=Y: %v", err)
	}
	write("N\n")
	if err := appArmorSupport(fs, param); err == nil {
		t.Error("enabled=N: supported, want not")
	}
	if err := os.Remove(param); err != nil {
		t.Fatal(err)
	}
	if err := appArmorSupport(fs, param); err == nil {
		t.Error("no enabled parameter: supported, want not")
	}
}
