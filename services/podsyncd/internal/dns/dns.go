package dns

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/services/podsyncd/internal/events"
)

// Limits of the API's pod validation (pkg/apis/core/validation), which the
// kubelet also applies to the composed configuration.
const (
	MaxNameservers     = 3
	MaxSearchPaths     = 32
	MaxSearchListChars = 2048
	// maxResolvConfBytes bounds how much of a resolv.conf is read.
	maxResolvConfBytes = 10 << 20
)

// defaultOptions are the options of a ClusterFirst pod.
var defaultOptions = []string{"ndots:5"}

// Config is the node's DNS setup, the kubelet's clusterDNS, clusterDomain
// and resolvConf settings.
type Config struct {
	// ClusterDNS are the cluster DNS servers' IPs; empty makes ClusterFirst
	// pods fall back to Default.
	ClusterDNS []string
	// ClusterDomain is the cluster's DNS domain ("cluster.local").
	ClusterDomain string
	// ResolvConf is the host resolver file Default pods (and ClusterFirst
	// search paths) start from; empty gives them a local resolver only.
	ResolvConf string
	// NodeIPs choose 127.0.0.1 or ::1 when ResolvConf is empty.
	NodeIPs []string
	// HostsPath is the node's hosts file for host-network pods (/etc/hosts).
	HostsPath string
	// NodeName names the node in node events.
	NodeName string
}

// Validate checks the cluster DNS servers (IP addresses) and the cluster
// domain (a DNS subdomain), naming the field.
func (c Config) Validate() error {
	for i, s := range c.ClusterDNS {
		if _, err := netip.ParseAddr(s); err != nil {
			return fmt.Errorf("cluster_dns[%d] %q is not an IP address", i, s)
		}
	}
	if c.ClusterDomain != "" {
		if errs := validation.IsDNS1123Subdomain(strings.TrimSuffix(c.ClusterDomain, ".")); len(errs) > 0 {
			return fmt.Errorf("cluster_domain %q: %s", c.ClusterDomain, strings.Join(errs, "; "))
		}
	}
	return nil
}

// Configurer computes pods' DNS settings.
type Configurer struct {
	cfg     Config
	rec     events.Recorder
	nodeRef *corev1.ObjectReference
	// readHost reads the host resolver configuration (a seam for tests).
	readHost func(path string) (*runtimeapi.DNSConfig, error)
}

// New validates cfg and returns a Configurer recording its warnings with rec.
func New(cfg Config, rec events.Recorder) (*Configurer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.HostsPath == "" {
		cfg.HostsPath = "/etc/hosts"
	}
	if rec == nil {
		rec = events.NewLog(nil)
	}
	return &Configurer{
		cfg: cfg, rec: rec, readHost: readResolvConf,
		nodeRef: &corev1.ObjectReference{Kind: "Node", Name: cfg.NodeName, UID: "", Namespace: ""},
	}, nil
}

// ClusterDomain is the configured cluster domain.
func (c *Configurer) ClusterDomain() string { return c.cfg.ClusterDomain }

type policy int

const (
	policyCluster policy = iota
	policyHost
	policyNone
)

func podPolicy(pod *corev1.Pod) (policy, error) {
	switch pod.Spec.DNSPolicy {
	case corev1.DNSNone:
		return policyNone, nil
	case corev1.DNSClusterFirstWithHostNet:
		return policyCluster, nil
	case corev1.DNSClusterFirst, "":
		if !pod.Spec.HostNetwork {
			return policyCluster, nil
		}
		// ClusterFirst on the host network means the host's resolver.
		return policyHost, nil
	case corev1.DNSDefault:
		return policyHost, nil
	}
	return policyCluster, fmt.Errorf("invalid dnsPolicy %q", pod.Spec.DNSPolicy)
}

// PodDNS is the pod's resolver configuration for the runtime.
func (c *Configurer) PodDNS(pod *corev1.Pod) (*runtimeapi.DNSConfig, error) {
	out, err := c.readHost(c.cfg.ResolvConf)
	if err != nil {
		return nil, err
	}
	p, err := podPolicy(pod)
	if err != nil {
		// The API server validates dnsPolicy; a static pod may not have been.
		c.rec.Eventf(pod, corev1.EventTypeWarning, events.DNSConfigForming, "%v; using %s", err, corev1.DNSClusterFirst)
	}
	switch p {
	case policyNone:
		out = &runtimeapi.DNSConfig{}
	case policyCluster:
		if len(c.cfg.ClusterDNS) > 0 {
			out.Servers = slices.Clone(c.cfg.ClusterDNS)
			out.Searches = c.clusterSearches(out.Searches, pod)
			out.Options = slices.Clone(defaultOptions)
			break
		}
		msg := fmt.Sprintf("kubelet does not have ClusterDNS IP configured and cannot create Pod using %q policy. Falling back to %q policy.", corev1.DNSClusterFirst, corev1.DNSDefault)
		c.rec.Eventf(c.nodeRef, corev1.EventTypeWarning, events.MissingClusterDNS, "%s", msg)
		c.rec.Eventf(pod, corev1.EventTypeWarning, events.MissingClusterDNS, "pod: %q. %s", podDesc(pod), msg)
		c.hostDefaults(out)
	case policyHost:
		c.hostDefaults(out)
	}
	if dc := pod.Spec.DNSConfig; dc != nil {
		out.Servers = unique(append(out.Servers, dc.Nameservers...))
		out.Searches = unique(append(out.Searches, dc.Searches...))
		out.Options = mergeOptions(out.Options, dc.Options)
	}
	out.Servers = c.fitServers(out.Servers, pod)
	out.Searches = c.fitSearches(out.Searches, pod)
	return out, nil
}

// hostDefaults: with no resolv.conf configured the pod gets a resolver on
// its own loopback and no search path (the kubelet's --resolv-conf="").
func (c *Configurer) hostDefaults(out *runtimeapi.DNSConfig) {
	if c.cfg.ResolvConf != "" {
		return
	}
	out.Servers = nil
	for _, ip := range c.cfg.NodeIPs {
		if a, err := netip.ParseAddr(ip); err == nil && a.Is6() && !a.Is4In6() {
			out.Servers = append(out.Servers, "::1")
		} else {
			out.Servers = append(out.Servers, "127.0.0.1")
		}
	}
	if len(out.Servers) == 0 {
		out.Servers = []string{"127.0.0.1"}
	}
	out.Searches = []string{"."}
}

func (c *Configurer) clusterSearches(host []string, pod *corev1.Pod) []string {
	d := c.cfg.ClusterDomain
	if d == "" {
		return host
	}
	return unique(append([]string{pod.Namespace + ".svc." + d, "svc." + d, d}, host...))
}

func (c *Configurer) fitServers(servers []string, pod *corev1.Pod) []string {
	if len(servers) <= MaxNameservers {
		return servers
	}
	servers = servers[:MaxNameservers]
	c.rec.Eventf(pod, corev1.EventTypeWarning, events.DNSConfigForming,
		"Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: %s", strings.Join(servers, " "))
	return servers
}

// fitSearches keeps at most MaxSearchPaths paths, drops paths longer than a
// DNS name (glibc aborts on them) and cuts from the end until the line fits.
func (c *Configurer) fitSearches(search []string, pod *corev1.Pod) []string {
	cut := false
	if len(search) > MaxSearchPaths {
		search, cut = search[:MaxSearchPaths], true
	}
	kept := search[:0:0]
	for _, s := range search {
		if len(s) > validation.DNS1123SubdomainMaxLength {
			cut = true
			continue
		}
		kept = append(kept, s)
	}
	for len(kept) > 0 && len(strings.Join(kept, " ")) > MaxSearchListChars {
		kept, cut = kept[:len(kept)-1], true
	}
	if cut {
		c.rec.Eventf(pod, corev1.EventTypeWarning, events.DNSConfigForming,
			"Search Line limits were exceeded, some search paths have been omitted, the applied search line is: %s", strings.Join(kept, " "))
	}
	return kept
}

// CheckResolvConf warns (a node event, as the kubelet does at start) when the
// host's search line cannot fit beside the cluster's paths.
func (c *Configurer) CheckResolvConf() {
	if c.cfg.ResolvConf == "" {
		return
	}
	host, err := c.readHost(c.cfg.ResolvConf)
	if err != nil {
		c.rec.Event(c.nodeRef, corev1.EventTypeWarning, "CheckLimitsForResolvConf", err.Error())
		return
	}
	limit := MaxSearchPaths
	if c.cfg.ClusterDomain != "" {
		limit -= 3
	}
	var msg string
	switch {
	case len(host.Searches) > limit:
		msg = fmt.Sprintf("Resolv.conf file '%s' contains search line consisting of more than %d domains!", c.cfg.ResolvConf, limit)
	case slices.ContainsFunc(host.Searches, func(s string) bool { return len(s) > validation.DNS1123SubdomainMaxLength }):
		msg = fmt.Sprintf("Resolv.conf file %q contains a search path which length is more than allowed %d chars!", c.cfg.ResolvConf, validation.DNS1123SubdomainMaxLength)
	case len(strings.Join(host.Searches, " ")) > MaxSearchListChars:
		msg = fmt.Sprintf("Resolv.conf file '%s' contains search line which length is more than allowed %d chars!", c.cfg.ResolvConf, MaxSearchListChars)
	default:
		return
	}
	c.rec.Event(c.nodeRef, corev1.EventTypeWarning, "CheckLimitsForResolvConf", msg)
}

func readResolvConf(path string) (*runtimeapi.DNSConfig, error) {
	if path == "" {
		return &runtimeapi.DNSConfig{}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("resolv_conf: %w", err)
	}
	defer f.Close()
	ns, search, opts, err := ParseResolvConf(f)
	if err != nil {
		return nil, fmt.Errorf("resolv_conf %s: %w", path, err)
	}
	return &runtimeapi.DNSConfig{Servers: ns, Searches: search, Options: opts}, nil
}

// ParseResolvConf reads a resolv.conf: nameserver lines accumulate, the last
// search line wins (trailing dots dropped, a lone "." ignored), options
// accumulate with a later value of the same option replacing an earlier one.
func ParseResolvConf(r io.Reader) (nameservers, searches, options []string, err error) {
	data, err := io.ReadAll(io.LimitReader(r, maxResolvConfBytes+1))
	if err != nil {
		return nil, nil, nil, err
	}
	if len(data) > maxResolvConfBytes {
		return nil, nil, nil, fmt.Errorf("larger than %d bytes", maxResolvConfBytes)
	}
	nameservers, searches, options = []string{}, []string{}, []string{}
	var errs []error
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		fields := strings.Fields(string(line))
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch fields[0] {
		case "nameserver":
			if len(fields) < 2 {
				errs = append(errs, errors.New("nameserver line has no address"))
				continue
			}
			nameservers = append(nameservers, fields[1])
		case "search":
			searches = []string{}
			for _, s := range fields[1:] {
				if s != "." {
					searches = append(searches, strings.TrimSuffix(s, "."))
				}
			}
		case "options":
			options = setOptions(options, fields[1:]...)
		}
	}
	return nameservers, searches, options, errors.Join(errs...)
}

func optionName(o string) string { n, _, _ := strings.Cut(o, ":"); return n }

// setOptions adds options, a later one replacing an earlier one of the same
// name in place.
func setOptions(opts []string, add ...string) []string {
	for _, o := range add {
		if i := slices.IndexFunc(opts, func(e string) bool { return optionName(e) == optionName(o) }); i >= 0 {
			opts[i] = o
		} else {
			opts = append(opts, o)
		}
	}
	return opts
}

// mergeOptions adds the pod's dnsConfig options over the base ones.
func mergeOptions(base []string, pod []corev1.PodDNSConfigOption) []string {
	out := slices.Clone(base)
	for _, o := range pod {
		s := o.Name
		if o.Value != nil && *o.Value != "" {
			s += ":" + *o.Value
		}
		out = setOptions(out, s)
	}
	if out == nil {
		out = []string{}
	}
	return out
}

func unique(in []string) []string {
	seen := make(map[string]bool, len(in))
	out := make([]string, 0, len(in))
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func podDesc(pod *corev1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}
