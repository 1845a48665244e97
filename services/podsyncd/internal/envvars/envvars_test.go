package envvars

import (
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

type objects struct {
	cms     map[string]*corev1.ConfigMap
	secrets map[string]*corev1.Secret
}

func (o objects) ConfigMap(_ context.Context, _, name string) (*corev1.ConfigMap, error) {
	if cm, ok := o.cms[name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
}

func (o objects) Secret(_ context.Context, _, name string) (*corev1.Secret, error) {
	if s, ok := o.secrets[name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}

func TestResolve(t *testing.T) {
	yes := true
	src := objects{
		cms:     map[string]*corev1.ConfigMap{"cm": {Data: map[string]string{"color": "blue", "bad=key": "x", "size": "L"}}},
		secrets: map[string]*corev1.Secret{"sec": {Data: map[string][]byte{"password": []byte("hunter2")}}},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "n1", ServiceAccountName: "sa", Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
				Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}}}},
	}
	env := func(name string, from *corev1.EnvVarSource) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: from}
	}
	tests := []struct {
		name    string
		c       corev1.Container
		want    []Var
		wantErr string
	}{
		{"envFrom with prefix skips names with =, env overrides and expands", corev1.Container{
			EnvFrom: []corev1.EnvFromSource{{Prefix: "CM_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}},
			Env:     []corev1.EnvVar{{Name: "CM_color", Value: "red-$(CM_size)"}},
		}, nil, ""},
		{"keys, fields and resources", corev1.Container{Env: []corev1.EnvVar{
			env("COLOR", &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "color"}}),
			env("PASS", &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "password"}}),
			env("NAME", &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}),
			env("APP", &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}),
			env("IPS", &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}),
			env("HOST", &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}),
			env("CPU_M", &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: resource.MustParse("1m")}}),
			env("CPU", &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.cpu"}}),
			env("MEM_MI", &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}),
			env("CPU_LIMIT", &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}),
		}}, []Var{{"COLOR", "blue"}, {"PASS", "hunter2"}, {"NAME", "p"}, {"APP", "web"}, {"IPS", "10.0.0.7,fd00::7"}, {"HOST", "192.168.1.2"},
			{"CPU_M", "250"}, {"CPU", "1"}, {"MEM_MI", "64"}, {"CPU_LIMIT", "4"}}, ""},
		{"optional missing is skipped", corev1.Container{
			EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}, Optional: &yes}}},
			Env:     []corev1.EnvVar{env("X", &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "missing", Optional: &yes}})},
		}, []Var{}, ""},
		{"required missing configMap", corev1.Container{
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}}}},
		}, nil, `configmaps "nope" not found`},
		{"required missing key", corev1.Container{Env: []corev1.EnvVar{
			env("X", &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "user"}}),
		}}, nil, "env X: couldn't find key user in Secret ns/sec"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.Name = "c"
			tc.c.Resources = pod.Spec.Containers[0].Resources
			got, err := Resolve(context.Background(), pod, &tc.c, src, Info{
				PodIPs: []string{"10.0.0.7", "fd00::7"}, HostIPs: []string{"192.168.1.2"},
				Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")},
			})
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil { // the envFrom case: map order is random
				m := map[string]string{}
				for _, v := range got {
					m[v.Name] = v.Value
				}
				want := map[string]string{"CM_color": "red-L", "CM_size": "L"}
				if !reflect.DeepEqual(m, want) {
					t.Fatalf("got %v, want %v", m, want)
				}
				return
			}
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %v\nwant %v", got, tc.want)
			}
		})
	}
}

// TestResolveEnvFromRelaxedNames: names that are not C identifiers, from
// keys and prefixes alike (the conformance "various prefixes" specs), reach
// the container as the kubelet passes them.
func TestResolveEnvFromRelaxedNames(t *testing.T) {
	src := objects{
		cms:     map[string]*corev1.ConfigMap{"cm": {Data: map[string]string{"data-1": "value-1", "1-data": "value-2"}}},
		secrets: map[string]*corev1.Secret{"sec": {Data: map[string][]byte{"data-1": []byte("value-1\n")}}},
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	cm := func(prefix string) corev1.EnvFromSource {
		return corev1.EnvFromSource{Prefix: prefix, ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}
	}
	c := &corev1.Container{Name: "c", EnvFrom: []corev1.EnvFromSource{
		cm(""), cm("1-"), cm("$_-"), cm("ABC_"), cm("#@!"),
		{Prefix: "p-", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}}},
	}}
	got, err := Resolve(context.Background(), pod, c, src, Info{})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, v := range got {
		m[v.Name] = v.Value
	}
	want := map[string]string{
		"data-1": "value-1", "1-data": "value-2",
		"1-data-1": "value-1", "1-1-data": "value-2",
		"$_-data-1": "value-1", "$_-1-data": "value-2",
		"ABC_data-1": "value-1", "ABC_1-data": "value-2",
		"#@!data-1": "value-1", "#@!1-data": "value-2",
		"p-data-1": "value-1\n",
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got  %v\nwant %v", m, want)
	}
}

func TestExpand(t *testing.T) {
	vals := map[string]string{"A": "x", "B": "y"}
	for in, want := range map[string]string{"$(A)-$(B)": "x-y", "$$(A)": "$(A)", "$(C)": "$(C)", "plain": "plain", "$(A": "$(A"} {
		if got := Expand(in, vals); got != want {
			t.Errorf("Expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzExpand(f *testing.F) {
	for _, s := range []string{"$(A)", "$$", "$(", "a$b$(B)c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_ = Expand(s, map[string]string{"A": "1", "B": "2"})
	})
}

type services struct {
	list   []*corev1.Service
	synced bool
}

func (s services) List() ([]*corev1.Service, error) { return s.list, nil }
func (s services) HasSynced() bool                  { return s.synced }

// Cases follow upstream's TestMakeEnvironmentVariables service-link cases and
// pkg/kubelet/envvars TestFromServices.
func TestServiceEnv(t *testing.T) {
	svc := func(ns, name, ip string, ports ...corev1.ServicePort) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: ports}}
	}
	all := services{synced: true, list: []*corev1.Service{
		svc("default", "kubernetes", "1.2.3.1", corev1.ServicePort{Protocol: corev1.ProtocolTCP, Port: 8081}),
		svc("test1", "test", "1.2.3.3", corev1.ServicePort{Protocol: corev1.ProtocolTCP, Port: 8083}),
		svc("test1", "my-db", "fd00::5", corev1.ServicePort{Name: "sql", Protocol: corev1.ProtocolUDP, Port: 5432}, corev1.ServicePort{Name: "admin", Port: 900}),
		svc("test1", "headless", corev1.ClusterIPNone, corev1.ServicePort{Port: 80}),
		svc("test2", "other", "1.2.3.4", corev1.ServicePort{Port: 80}),
		// A same-named service in the pod's namespace replaces the master one.
		svc("kubernetes", "kubernetes", "1.2.3.9", corev1.ServicePort{Port: 443}),
	}}
	no := false
	tests := []struct {
		name  string
		ns    string
		links *bool
		svcs  Services
		want  map[string]string
		err   string
	}{
		{"links on", "test1", nil, all, map[string]string{
			"KUBERNETES_SERVICE_HOST": "1.2.3.1", "KUBERNETES_SERVICE_PORT": "8081", "KUBERNETES_PORT": "tcp://1.2.3.1:8081",
			"KUBERNETES_PORT_8081_TCP": "tcp://1.2.3.1:8081", "KUBERNETES_PORT_8081_TCP_PROTO": "tcp", "KUBERNETES_PORT_8081_TCP_PORT": "8081", "KUBERNETES_PORT_8081_TCP_ADDR": "1.2.3.1",
			"TEST_SERVICE_HOST": "1.2.3.3", "TEST_SERVICE_PORT": "8083", "TEST_PORT": "tcp://1.2.3.3:8083",
			"TEST_PORT_8083_TCP": "tcp://1.2.3.3:8083", "TEST_PORT_8083_TCP_PROTO": "tcp", "TEST_PORT_8083_TCP_PORT": "8083", "TEST_PORT_8083_TCP_ADDR": "1.2.3.3",
			"MY_DB_SERVICE_HOST": "fd00::5", "MY_DB_SERVICE_PORT": "5432", "MY_DB_SERVICE_PORT_SQL": "5432", "MY_DB_SERVICE_PORT_ADMIN": "900", "MY_DB_PORT": "udp://[fd00::5]:5432",
			"MY_DB_PORT_5432_UDP": "udp://[fd00::5]:5432", "MY_DB_PORT_5432_UDP_PROTO": "udp", "MY_DB_PORT_5432_UDP_PORT": "5432", "MY_DB_PORT_5432_UDP_ADDR": "fd00::5",
			"MY_DB_PORT_900_TCP": "tcp://[fd00::5]:900", "MY_DB_PORT_900_TCP_PROTO": "tcp", "MY_DB_PORT_900_TCP_PORT": "900", "MY_DB_PORT_900_TCP_ADDR": "fd00::5",
		}, ""},
		{"links off keeps the master service", "test2", &no, all, map[string]string{
			"KUBERNETES_SERVICE_HOST": "1.2.3.1", "KUBERNETES_SERVICE_PORT": "8081", "KUBERNETES_PORT": "tcp://1.2.3.1:8081",
			"KUBERNETES_PORT_8081_TCP": "tcp://1.2.3.1:8081", "KUBERNETES_PORT_8081_TCP_PROTO": "tcp", "KUBERNETES_PORT_8081_TCP_PORT": "8081", "KUBERNETES_PORT_8081_TCP_ADDR": "1.2.3.1",
		}, ""},
		{"same-named service in the pod's namespace wins", "kubernetes", nil, all, map[string]string{
			"KUBERNETES_SERVICE_HOST": "1.2.3.9", "KUBERNETES_SERVICE_PORT": "443", "KUBERNETES_PORT": "tcp://1.2.3.9:443",
			"KUBERNETES_PORT_443_TCP": "tcp://1.2.3.9:443", "KUBERNETES_PORT_443_TCP_PROTO": "tcp", "KUBERNETES_PORT_443_TCP_PORT": "443", "KUBERNETES_PORT_443_TCP_ADDR": "1.2.3.9",
		}, ""},
		{"standalone: none", "test1", nil, nil, map[string]string{}, ""},
		{"not synced yet", "test1", nil, services{}, nil, "services have not yet been read at least once, cannot construct envvars"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: tc.ns}, Spec: corev1.PodSpec{EnableServiceLinks: tc.links}}
			got, err := ServiceEnv(pod, tc.svcs)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %v\nwant %v", got, tc.want)
			}
		})
	}
	// Static pods do not wait for the first list.
	static := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Annotations: map[string]string{"kubernetes.io/config.source": "file"}}}
	if _, err := ServiceEnv(static, services{}); err != nil {
		t.Fatalf("static pod: %v", err)
	}
}

func TestResolveWithServiceEnv(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"}}
	c := &corev1.Container{Name: "c", Env: []corev1.EnvVar{
		{Name: "URL", Value: "http://$(DB_SERVICE_HOST):$(DB_SERVICE_PORT)"},
		{Name: "DB_SERVICE_PORT", Value: "override"},
	}}
	got, err := Resolve(context.Background(), pod, c, nil, Info{ServiceEnv: map[string]string{"DB_SERVICE_HOST": "10.0.0.5", "DB_SERVICE_PORT": "5432", "A_SERVICE_HOST": "10.0.0.6"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Var{{"URL", "http://10.0.0.5:5432"}, {"DB_SERVICE_PORT", "override"}, {"A_SERVICE_HOST", "10.0.0.6"}, {"DB_SERVICE_HOST", "10.0.0.5"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
}

func TestExpandSubPath(t *testing.T) {
	vals := map[string]string{"POD_NAME": "foo", "ANNOTATION": "mypath", "EMPTY": ""}
	tests := []struct{ expr, want, wantErr string }{
		{"$(ANNOTATION)/$(POD_NAME)", "mypath/foo", ""},
		{"logs", "logs", ""},
		{"$$(POD_NAME)", "$(POD_NAME)", ""},
		{"$(EMPTY)/$(POD_NAME)", "", "missing value for EMPTY"},
		{"$(NOPE)/$(EMPTY)", "", "missing value for EMPTY, NOPE"},
	}
	for _, tc := range tests {
		t.Run(tc.expr, func(t *testing.T) {
			got, err := ExpandSubPath(tc.expr, vals)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("= %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
