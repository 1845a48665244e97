package addons

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/render.golden.yaml")

// testValues are the cluster harness's values with a fixed API server.
var testValues = Values{
	APIServerHost: "172.30.0.2", APIServerPort: 6443,
	PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/16",
	ClusterDNS: "10.96.0.10", ClusterDomain: "cluster.local",
}

func TestRenderGolden(t *testing.T) {
	got, err := Render(testValues)
	if err != nil {
		t.Fatal(err)
	}
	// The podnet tag follows its sources; the golden file names it by
	// placeholder so editing podnet does not churn the golden file.
	img, err := PodnetImage()
	if err != nil {
		t.Fatal(err)
	}
	got = bytes.ReplaceAll(got, []byte(img), []byte(PodnetRepository+":SOURCE-HASH"))
	golden := filepath.Join("testdata", "render.golden.yaml")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Render differs from %s (go test -update rewrites it after review):\n%s", golden, got)
	}
}

// TestRenderDecodes decodes every document strictly with client-go's
// scheme (plus the aggregator's APIService): a misspelt field or a wrong
// type fails here rather than in kubectl apply.
func TestRenderDecodes(t *testing.T) {
	out, err := Render(testValues)
	if err != nil {
		t.Fatal(err)
	}
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := apiregv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	dec := serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	kinds := map[string]int{}
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, gvk, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decode:\n%s\n%v", doc, err)
		}
		if obj == nil {
			t.Fatalf("no object from:\n%s", doc)
		}
		kinds[gvk.Kind]++
	}
	want := map[string]int{
		"ServiceAccount": 4, "ClusterRole": 4, "ClusterRoleBinding": 5, "RoleBinding": 1,
		"ConfigMap": 2, "DaemonSet": 2, "Deployment": 2, "Service": 2, "APIService": 1,
	}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%d objects of kind %s, want %d (all: %v)", kinds[k], k, n, kinds)
		}
	}
}

func TestRenderRejectsBadValues(t *testing.T) {
	_, err := Render(Values{APIServerHost: "cp", APIServerPort: 0, PodCIDR: "10.244.0.0/16",
		ServiceCIDR: "10.244.0.0/12", ClusterDNS: "10.96.0.10", ClusterDomain: "Cluster_Local"})
	if err == nil {
		t.Fatal("Render accepted bad values")
	}
	for _, field := range []string{"APIServerHost", "APIServerPort", "ServiceCIDR", "ClusterDomain"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error does not name %s: %v", field, err)
		}
	}
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// TestRenderKubeProxyConfig decodes the kube-proxy ConfigMap's two files
// strictly: the KubeProxyConfiguration into kube-proxy's own v1alpha1 type
// and the kubeconfig with clientcmd, and checks what the cluster relies on.
func TestRenderKubeProxyConfig(t *testing.T) {
	out, err := Render(testValues)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	var cm *corev1.ConfigMap
	for cm == nil {
		doc, err := r.Read()
		if err != nil {
			t.Fatalf("no kube-proxy ConfigMap: %v", err)
		}
		var c corev1.ConfigMap
		if yaml.Unmarshal(doc, &c) == nil && c.Kind == "ConfigMap" && c.Name == "kube-proxy" {
			cm = &c
		}
	}
	var kp kubeproxyv1alpha1.KubeProxyConfiguration
	if err := yaml.UnmarshalStrict([]byte(cm.Data["config.conf"]), &kp); err != nil {
		t.Fatalf("config.conf: %v", err)
	}
	if kp.Mode != "iptables" || kp.ClusterCIDR != testValues.PodCIDR || kp.ClientConnection.Kubeconfig != "/var/lib/kube-proxy/kubeconfig.conf" {
		t.Errorf("mode %q clusterCIDR %q kubeconfig %q", kp.Mode, kp.ClusterCIDR, kp.ClientConnection.Kubeconfig)
	}
	kc, err := clientcmd.Load([]byte(cm.Data["kubeconfig.conf"]))
	if err != nil {
		t.Fatalf("kubeconfig.conf: %v", err)
	}
	if server := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster].Server; server != "https://172.30.0.2:6443" {
		t.Errorf("kube-proxy reaches the API server at %q, want the control plane's address", server)
	}
}
