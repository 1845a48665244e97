package manifest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/internal/podsource"
)

var fileSrc = Source{NodeName: "node1", Location: "/etc/kubernetes/manifests/web.yaml", File: true}

const webYAML = `apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: nginx
    image: nginx:1.27
    ports:
    - containerPort: 80
    resources:
      limits: {cpu: 100m, memory: 64Mi}
    livenessProbe:
      httpGet: {port: 80}
  - name: side
    image: busybox
  volumes:
  - name: data
  - name: host
    hostPath: {path: /var/log}
`

func TestParsePodDefaults(t *testing.T) {
	p, err := ParsePod([]byte(webYAML), fileSrc)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Spec.Containers
	checks := []struct {
		what      string
		got, want any
	}{
		{"name", p.Name, "web-node1"},
		{"namespace", p.Namespace, "default"},
		{"nodeName", p.Spec.NodeName, "node1"},
		{"hash annotation", p.Annotations[podsource.HashAnnotation], string(p.UID)},
		{"uid length", len(p.UID), 32},
		{"phase", p.Status.Phase, corev1.PodPending},
		{"kind cleared", p.Kind, ""},
		{"restartPolicy", p.Spec.RestartPolicy, corev1.RestartPolicyAlways},
		{"dnsPolicy", p.Spec.DNSPolicy, corev1.DNSClusterFirst},
		{"schedulerName", p.Spec.SchedulerName, corev1.DefaultSchedulerName},
		{"grace", *p.Spec.TerminationGracePeriodSeconds, int64(30)},
		{"serviceLinks", *p.Spec.EnableServiceLinks, true},
		{"securityContext", p.Spec.SecurityContext != nil, true},
		{"pull policy tagged", c[0].ImagePullPolicy, corev1.PullIfNotPresent},
		{"pull policy latest", c[1].ImagePullPolicy, corev1.PullAlways},
		{"termination path", c[0].TerminationMessagePath, corev1.TerminationMessagePathDefault},
		{"termination policy", c[0].TerminationMessagePolicy, corev1.TerminationMessageReadFile},
		{"protocol", c[0].Ports[0].Protocol, corev1.ProtocolTCP},
		{"requests from limits", c[0].Resources.Requests.Cpu().String(), "100m"},
		{"probe period", c[0].LivenessProbe.PeriodSeconds, int32(10)},
		{"probe path", c[0].LivenessProbe.HTTPGet.Path, "/"},
		{"probe scheme", c[0].LivenessProbe.HTTPGet.Scheme, corev1.URISchemeHTTP},
		{"emptyDir default", p.Spec.Volumes[0].EmptyDir != nil, true},
		{"hostPath type", *p.Spec.Volumes[1].HostPath.Type, corev1.HostPathUnset},
		{"toleration", p.Spec.Tolerations, []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}},
	}
	for _, c := range checks {
		if !equal(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

func equal(a, b any) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func TestUIDDependsOnSourceAndNode(t *testing.T) {
	a, _ := ParsePod([]byte(webYAML), fileSrc)
	b, _ := ParsePod([]byte(webYAML), Source{NodeName: "other", Location: fileSrc.Location, File: true})
	c, _ := ParsePod([]byte(webYAML), Source{NodeName: "node1", Location: "/elsewhere.yaml", File: true})
	u, _ := ParsePod([]byte(webYAML), Source{NodeName: "node1", Location: "http://x/pods"})
	again, _ := ParsePod([]byte(webYAML), fileSrc)
	if a.UID != again.UID {
		t.Fatal("UID not stable")
	}
	if a.UID == b.UID || a.UID == c.UID || a.UID == u.UID {
		t.Fatalf("UIDs collide: %s %s %s %s", a.UID, b.UID, c.UID, u.UID)
	}
	if len(u.Spec.Tolerations) != 0 {
		t.Fatalf("URL pods get no toleration, got %v", u.Spec.Tolerations)
	}
	// Like upstream, a node name that is not a DNS subdomain makes every
	// static pod invalid.
	if _, err := ParsePod([]byte(webYAML), Source{NodeName: "Node1", Location: "x", File: true}); err == nil || !strings.Contains(err.Error(), "spec.nodeName") {
		t.Fatalf("upper-case node name: %v", err)
	}
	explicit, err := ParsePod([]byte(strings.Replace(webYAML, "  name: web\n", "  name: web\n  uid: given\n", 1)), fileSrc)
	if err != nil || explicit.UID != "given" {
		t.Fatalf("explicit uid: %v %v", explicit.UID, err)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, data string
		notPod     bool
		want       string
	}{
		{name: "garbage", data: "{{{", notPod: true},
		{name: "no kind", data: `{"apiVersion":"v1","metadata":{"name":"x"}}`, notPod: true, want: "Kind"},
		{name: "service", data: "apiVersion: v1\nkind: Service\nmetadata: {name: x}\n", notPod: true, want: "Service"},
		{name: "no name", data: "apiVersion: v1\nkind: Pod\nspec: {containers: [{name: c, image: i}]}\n", want: "name is needed"},
		{name: "no containers", data: "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {}\n", want: "spec.containers"},
		{name: "no image", data: "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: c}]}\n", want: "spec.containers[0].image"},
		{name: "bad name", data: "apiVersion: v1\nkind: Pod\nmetadata: {name: X_Y}\nspec: {containers: [{name: c, image: i}]}\n", want: "metadata.name"},
		{name: "duplicate container", data: "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: c, image: i}, {name: c, image: i}]}\n", want: "spec.containers[1].name"},
		{name: "bad restart policy", data: "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {restartPolicy: Sometimes, containers: [{name: c, image: i}]}\n", want: "spec.restartPolicy"},
		{name: "bad port", data: "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: c, image: i, ports: [{containerPort: 70000}]}]}\n", want: "containerPort"},
		{name: "unknown volume", data: "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: c, image: i, volumeMounts: [{name: v, mountPath: /v}]}]}\n", want: "volumeMounts[0].name"},
		{name: "secret reference", data: "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: c, image: i}], volumes: [{name: s, secret: {secretName: s}}]}\n", want: "may not reference secrets"},
		{name: "service account", data: "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {serviceAccountName: sa, containers: [{name: c, image: i}]}\n", want: "serviceaccounts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePod([]byte(tt.data), fileSrc)
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, ErrNotPod) != tt.notPod {
				t.Fatalf("ErrNotPod = %v, want %v: %v", errors.Is(err, ErrNotPod), tt.notPod, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestParsePods(t *testing.T) {
	list := `{"apiVersion":"v1","kind":"PodList","items":[
	 {"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i"}]}},
	 {"metadata":{"name":"b","namespace":"kube-system"},"spec":{"containers":[{"name":"c","image":"i"}]}}]}`
	src := Source{NodeName: "n", Location: "http://h/pods"}
	pods, err := ParsePods([]byte(list), src)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 2 || pods[0].Name != "a-n" || pods[1].Namespace != "kube-system" || pods[0].UID == pods[1].UID {
		t.Fatalf("pods = %v", pods)
	}
	single, err := ParsePods([]byte(webYAML), src)
	if err != nil || len(single) != 1 {
		t.Fatalf("single pod: %v %v", single, err)
	}
	bad := strings.Replace(list, `"image":"i"}]}}]}`, `"image":""}]}}]}`, 1)
	if _, err := ParsePods([]byte(bad), src); err == nil || !strings.Contains(err.Error(), "items[1]") {
		t.Fatalf("bad list item: %v", err)
	}
	if _, err := ParsePods([]byte(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"}}`), src); !errors.Is(err, ErrNotPod) {
		t.Fatalf("node: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(webYAML), true)
	f.Add([]byte(`{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i"}]}}]}`), false)
	f.Add([]byte("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: c, image: i, resources: {limits: {cpu: 1.5}}}]}\n"), true)
	f.Add([]byte("apiVersion: v1\nkind: Pod\nmetadata: {name: x, annotations: {pod.beta.kubernetes.io/init-containers: x}}\nspec: {hostNetwork: true, containers: [{name: c, image: i, ports: [{containerPort: 1}]}]}\n"), true)
	f.Add([]byte("- a\n- b"), false)
	f.Fuzz(func(t *testing.T, data []byte, file bool) {
		src := Source{NodeName: "n", Location: "loc", File: file}
		pods, err := ParsePods(data, src)
		if err != nil {
			return
		}
		for _, p := range pods {
			if p.UID == "" || p.Annotations[podsource.HashAnnotation] == "" || p.Spec.NodeName != "n" || !strings.HasSuffix(p.Name, "-n") {
				t.Fatalf("accepted pod lacks static defaults: %s %s", p.Name, p.UID)
			}
			if _, err := p.Marshal(); err != nil {
				t.Fatalf("accepted pod does not marshal: %v", err)
			}
		}
	})
}
