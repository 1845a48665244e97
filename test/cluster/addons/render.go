package addons

import (
	"bytes"
	"embed"
	"fmt"
	"net"
	"strconv"
	"strings"
	"text/template"
)

// manifestFiles are the add-ons' manifests, in the order Render emits them:
// the pod network first, then what needs it.
var manifestFiles = []string{"podnet.yaml", "kube-proxy.yaml", "coredns.yaml", "metrics-server.yaml"}

//go:embed manifests/*.yaml
var manifests embed.FS

// Images are the add-on images Render refers to.
type Images struct {
	KubeProxy, CoreDNS, MetricsServer, Podnet string
}

// renderData is what the manifest templates see.
type renderData struct {
	V         Values
	APIServer string // host:port, IPv6 bracketed
	Images    Images
	Corefile  string
}

// Render returns the multi-document YAML of every add-on, ready for kubectl
// apply. Bad Values are reported all at once, each naming its field.
func Render(v Values) ([]byte, error) {
	if errs := v.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("addons: %w", errs.ToAggregate())
	}
	podnet, err := PodnetImage()
	if err != nil {
		return nil, err
	}
	data := renderData{
		V:         v,
		APIServer: net.JoinHostPort(v.APIServerHost, strconv.Itoa(v.APIServerPort)),
		Images:    Images{KubeProxy: KubeProxyImage, CoreDNS: CoreDNSImage, MetricsServer: MetricsServerImage, Podnet: podnet},
		Corefile:  corefile(v.ClusterDomain),
	}
	funcs := template.FuncMap{"indent": indent}
	var out bytes.Buffer
	for i, name := range manifestFiles {
		tmpl, err := template.New(name).Funcs(funcs).Option("missingkey=error").ParseFS(manifests, "manifests/"+name)
		if err != nil {
			return nil, fmt.Errorf("addons: manifest %s: %w", name, err)
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		if err := tmpl.Execute(&out, data); err != nil {
			return nil, fmt.Errorf("addons: manifest %s: %w", name, err)
		}
	}
	return out.Bytes(), nil
}

// corefile is CoreDNS's configuration: kubeadm's server block (the
// kubernetes plugin for the cluster domain and reverse zones, health with a
// lame-duck period, readiness, metrics on :9153, the node's resolver for
// everything else, a cache that keeps cluster answers fresh, loop
// detection, reload and answer shuffling).
func corefile(domain string) string {
	return fmt.Sprintf(`.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes %[1]s in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
        max_concurrent 1000
    }
    cache 30 {
        disable success %[1]s
        disable denial %[1]s
    }
    loop
    reload
    loadbalance
}
`, domain)
}

// indent prefixes every non-empty line of s with n spaces, for a block
// scalar inside the YAML.
func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = pad + l
		}
	}
	return strings.Join(lines, "\n")
}
