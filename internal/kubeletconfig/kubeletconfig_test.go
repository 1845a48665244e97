package kubeletconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

func TestFieldsCoverType(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range Fields {
		if _, ok := jsonIndex[f.Path]; !ok {
			t.Errorf("Fields has %q, which KubeletConfiguration does not", f.Path)
		}
		if seen[f.Path] {
			t.Errorf("Fields has %q twice", f.Path)
		}
		seen[f.Path] = true
		if f.Owner == "" {
			t.Errorf("%s: no owner", f.Path)
		}
	}
	for name := range jsonIndex {
		if !seen[name] {
			t.Errorf("KubeletConfiguration field %q is missing from Fields", name)
		}
	}
}

func TestIs(t *testing.T) {
	for in, want := range map[string]bool{
		"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n": true,
		"kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\n": true,
		"run_dir: /run/microlet\n":                             false,
		"apiVersion: v1\nkind: KubeletConfiguration\n":         false,
		"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: X\n": false,
		"":  false,
		"[": false,
	} {
		if got := Is([]byte(in)); got != want {
			t.Errorf("Is(%q) = %v, want %v", in, got, want)
		}
	}
}

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubelet.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

func TestLoadErrors(t *testing.T) {
	for name, tc := range map[string]struct{ body, want string }{
		"unknown field":   {header + "bogusField: 1\n", `strict decoding error: unknown field "bogusField"`},
		"duplicate field": {header + "maxPods: 1\nmaxPods: 2\n", `"maxPods" already set`},
		"wrong type":      {header + "maxPods: many\n", "maxPods"},
		"empty":           {"", "was empty"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(write(t, tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "failed to load Kubelet config file ") {
				t.Fatalf("err = %v, want the kubelet's wording containing %q", err, tc.want)
			}
		})
	}
}

func TestLoadRelativePaths(t *testing.T) {
	p := write(t, header+"staticPodPath: manifests\ntlsCertFile: /abs/cert\n")
	kc, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(filepath.Dir(p), "manifests"); kc.StaticPodPath != want {
		t.Errorf("staticPodPath = %q, want %q", kc.StaticPodPath, want)
	}
	if kc.TLSCertFile != "/abs/cert" {
		t.Errorf("tlsCertFile = %q", kc.TLSCertFile)
	}
}

func TestValidateAllAtOnce(t *testing.T) {
	kc := &kubeletv1beta1.KubeletConfiguration{
		Port:                        70000,
		MaxPods:                     -1,
		ImageGCHighThresholdPercent: ptr.To[int32](50),
		ImageGCLowThresholdPercent:  ptr.To[int32](60),
		HairpinMode:                 "bogus",
	}
	SetDefaults(kc)
	err := Validate(kc)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"invalid configuration: port (--port) 70000 must be between 1 and 65535, inclusive",
		"invalid configuration: maxPods (--max-pods) -1 must not be a negative number",
		"invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 60 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 50",
		`invalid configuration: option "bogus" specified for hairpinMode (--hairpin-mode)`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestDefaultsValid(t *testing.T) {
	kc := &kubeletv1beta1.KubeletConfiguration{}
	SetDefaults(kc)
	defer func(f func() bool) { cgroupV1 = f }(cgroupV1)
	cgroupV1 = func() bool { return false }
	if err := Validate(kc); err != nil {
		t.Fatalf("defaults are invalid: %v", err)
	}
	if tr := Translate(kc, &kubeletv1beta1.KubeletConfiguration{}); len(tr.Unimplemented) != 0 {
		t.Errorf("defaults warn about %v", tr.Unimplemented)
	}
}

func TestTranslate(t *testing.T) {
	set := &kubeletv1beta1.KubeletConfiguration{
		StaticPodPath:             "/etc/kubernetes/manifests",
		MaxPods:                   30,
		EvictionHard:              map[string]string{"nodefs.available": "5%", "memory.available": "100Mi"},
		NodeStatusUpdateFrequency: metavDuration("4s"),
		ReadOnlyPort:              10255,
		TLSMinVersion:             "VersionTLS13",
		ContainerRuntimeEndpoint:  "unix:///run/containerd/containerd.sock",
		EnableContentionProfiling: true,
	}
	kc := set.DeepCopy()
	SetDefaults(kc)
	tr := Translate(kc, set)
	for svc, want := range map[string][]string{
		PodConfig:   {"--manifest-dir=/etc/kubernetes/manifests"},
		NodeAPI:     {"--tls-min-version=VersionTLS13", "--read-only-port=10255"},
		NodeStatusd: {"--max-pods=30", "--node-status-update-frequency=4s", "--node-status-report-frequency=4s", "--eviction-hard=memory.available=100Mi,nodefs.available=5%"},
		PodSyncd:    {"--eviction-hard=memory.available=100Mi,nodefs.available=5%"},
	} {
		for _, w := range want {
			if !slices.Contains(tr.Args[svc], w) {
				t.Errorf("%s args %v lack %q", svc, tr.Args[svc], w)
			}
		}
	}
	if !slices.Contains(tr.Supervisor, "--runtime-endpoint=unix:///run/containerd/containerd.sock") {
		t.Errorf("supervisor args %v lack the runtime endpoint", tr.Supervisor)
	}
	if want := []string{"enableContentionProfiling"}; !reflect.DeepEqual(tr.Unimplemented, want) {
		t.Errorf("Unimplemented = %v, want %v", tr.Unimplemented, want)
	}
	// Unset, the runtime endpoint stays runtime-shim.
	set.ContainerRuntimeEndpoint = ""
	if tr := Translate(kc, set); len(tr.Supervisor) != 0 {
		t.Errorf("supervisor args %v without a runtime endpoint in the file", tr.Supervisor)
	}
}

func TestCount(t *testing.T) {
	impl, total := Count()
	t.Logf("KubeletConfiguration fields implemented: %d of %d", impl, total)
	if total != len(jsonIndex) {
		t.Errorf("total %d, type has %d", total, len(jsonIndex))
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(header + "maxPods: 10\n"))
	f.Add([]byte(header + "evictionHard: {memory.available: 100Mi}\nregisterWithTaints: [{key: a, effect: NoSchedule}]\n"))
	f.Add([]byte(header + "bogus: 1\n"))
	f.Add([]byte("run_dir: /x\n"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if !Is(data) {
			return
		}
		kc, err := Decode(data)
		if err != nil {
			return
		}
		SetDefaults(kc)
		_ = Validate(kc)
		Translate(kc, kc)
	})
}

func metavDuration(s string) metav1.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return metav1.Duration{Duration: d}
}

func TestCgroupV1(t *testing.T) {
	defer func(f func() bool) { cgroupV1 = f }(cgroupV1)
	cgroupV1 = func() bool { return true }
	kc := &kubeletv1beta1.KubeletConfiguration{}
	SetDefaults(kc)
	if err := Validate(kc); err == nil || !strings.Contains(err.Error(), "kubelet is configured to not run on a host using cgroup v1") {
		t.Errorf("cgroup v1 host with failCgroupV1 defaulted: err = %v", err)
	}
	kc.FailCgroupV1 = ptr.To(false)
	if err := Validate(kc); err != nil {
		t.Errorf("failCgroupV1: false: %v", err)
	}
}

// TestKubeadm: the KubeletConfiguration kubeadm v1.36.3 writes with its
// defaults (testdata/kubeadm.yaml, from test/kubeletconfig/cmd/kubeadmconfig)
// is accepted and sets nothing microlet does not implement.
func TestKubeadm(t *testing.T) {
	defer func(f func() bool) { cgroupV1 = f }(cgroupV1)
	cgroupV1 = func() bool { return false }
	set, err := LoadUndefaulted("testdata/kubeadm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kc := set.DeepCopy()
	SetDefaults(kc)
	if err := Validate(kc); err != nil {
		t.Fatal(err)
	}
	tr := Translate(kc, set)
	if len(tr.Unimplemented) != 0 {
		t.Errorf("kubeadm's configuration warns about %v", tr.Unimplemented)
	}
	for svc, want := range map[string]string{
		PodConfig: "--manifest-dir=/etc/kubernetes/manifests",
		PodSyncd:  "--cluster-dns=10.96.0.10",
		NodeAPI:   "--client-ca-file=/etc/kubernetes/pki/ca.crt",
	} {
		if !slices.Contains(tr.Args[svc], want) {
			t.Errorf("%s args %v lack %q", svc, tr.Args[svc], want)
		}
	}
}

// TestDocsUpToDate fails when docs/kubelet-config-fields.md is not what
// Markdown writes (make generate).
func TestDocsUpToDate(t *testing.T) {
	got, err := os.ReadFile("../../docs/kubelet-config-fields.md")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != Markdown() {
		t.Error("docs/kubelet-config-fields.md is out of date: run make generate")
	}
}
