package dns

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// EtcHosts is where containers see the managed hosts file.
const EtcHosts = "/etc/hosts"

// HostsFileName is the managed hosts file's name inside the pod's directory.
const HostsFileName = "etc-hosts"

const (
	managedHeader        = "# Kubernetes-managed hosts file.\n"
	managedHeaderHostNet = "# Kubernetes-managed hosts file (host network).\n"
	maxHostnameLen       = 63
	// maxKernelHostnameLen is the longest name the kernel's nodename field
	// takes (65 bytes with the terminating NUL).
	maxKernelHostnameLen = 64
)

// PodHostname is the pod's hostname and domain as the kubelet computes them:
// spec.hostname or the pod name (cut to 63 characters without a trailing
// '-' or '.'), and "<subdomain>.<ns>.svc.<cluster domain>" when
// spec.subdomain is set; spec.hostnameOverride, when set, is the hostname
// and there is no domain.
func PodHostname(pod *corev1.Pod, clusterDomain string) (hostname, domain string, err error) {
	if o := pod.Spec.HostnameOverride; o != nil {
		// HostnameOverride (beta, on by default since 1.35) replaces the
		// hostname whole and leaves no domain, subdomain or not.
		if msgs := validation.IsDNS1123Subdomain(*o); len(msgs) > 0 {
			return "", "", fmt.Errorf("pod HostnameOverride %q is not a valid DNS subdomain: %s", *o, strings.Join(msgs, ";"))
		}
		hostname, err = truncateHostname(pod.Name, *o)
		return hostname, "", err
	}
	hostname = pod.Name
	if h := pod.Spec.Hostname; h != "" {
		if msgs := validation.IsDNS1123Label(h); len(msgs) > 0 {
			return "", "", fmt.Errorf("pod Hostname %q is not a valid DNS label: %s", h, strings.Join(msgs, ";"))
		}
		hostname = h
	}
	if hostname, err = truncateHostname(pod.Name, hostname); err != nil {
		return "", "", err
	}
	if s := pod.Spec.Subdomain; s != "" {
		if msgs := validation.IsDNS1123Label(s); len(msgs) > 0 {
			return "", "", fmt.Errorf("pod Subdomain %q is not a valid DNS label: %s", s, strings.Join(msgs, ";"))
		}
		domain = fmt.Sprintf("%s.%s.svc.%s", s, pod.Namespace, clusterDomain)
	}
	return hostname, domain, nil
}

// KernelHostname is the hostname the pod's sandbox (its UTS namespace) gets
// from PodHostname's hostname and domain, as the kubelet's: the hostname, or
// with spec.setHostnameAsFQDN and a domain the FQDN "<hostname>.<domain>",
// which must fit the kernel's 64 bytes. The error is the kubelet's text,
// which the FailedCreatePodSandBox event carries.
func KernelHostname(hostname, domain string, asFQDN *bool) (string, error) {
	if domain == "" || asFQDN == nil || !*asFQDN {
		return hostname, nil
	}
	fqdn := hostname + "." + domain
	if len(fqdn) > maxKernelHostnameLen {
		return "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (%d characters is the max, %d characters requested)", fqdn, maxKernelHostnameLen, len(fqdn))
	}
	return fqdn, nil
}

// truncateHostname cuts a hostname to 63 characters without a trailing '-'
// or '.', as the kubelet does.
func truncateHostname(podName, hostname string) (string, error) {
	if len(hostname) <= maxHostnameLen {
		return hostname, nil
	}
	cut := strings.TrimRight(hostname[:maxHostnameLen], "-.")
	if cut == "" {
		return "", fmt.Errorf("hostname for pod %q was invalid: %q", podName, hostname)
	}
	return cut, nil
}

// MountsEtcHosts says whether the container gets the managed hosts file:
// when the pod has its IPs (or is on the host network) and the container
// does not mount something at /etc/hosts itself.
func MountsEtcHosts(pod *corev1.Pod, c *corev1.Container, podIPs []string) bool {
	if len(podIPs) == 0 && !pod.Spec.HostNetwork {
		return false
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath == EtcHosts {
			return false
		}
	}
	return true
}

// HostsFile is the content of the pod's managed hosts file: for a pod on
// the pod network, loopback entries, each pod IP with the hostname (and
// FQDN) and the hostAliases; for a host-network pod, the node's hosts file
// and the hostAliases.
func (c *Configurer) HostsFile(pod *corev1.Pod, podIPs []string) ([]byte, error) {
	var b bytes.Buffer
	if pod.Spec.HostNetwork {
		node, err := os.ReadFile(c.cfg.HostsPath)
		if err != nil {
			return nil, err
		}
		b.WriteString(managedHeaderHostNet)
		b.Write(node)
		writeAliases(&b, pod.Spec.HostAliases)
		return b.Bytes(), nil
	}
	hostname, domain, err := PodHostname(pod, c.cfg.ClusterDomain)
	if err != nil {
		return nil, err
	}
	b.WriteString(managedHeader)
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\n")
	b.WriteString("fe00::0\tip6-mcastprefix\n")
	b.WriteString("fe00::1\tip6-allnodes\n")
	b.WriteString("fe00::2\tip6-allrouters\n")
	for _, ip := range podIPs {
		if domain != "" {
			fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, hostname, domain, hostname)
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
		}
	}
	writeAliases(&b, pod.Spec.HostAliases)
	return b.Bytes(), nil
}

func writeAliases(b *bytes.Buffer, aliases []corev1.HostAlias) {
	if len(aliases) == 0 {
		return
	}
	b.WriteString("\n# Entries added by HostAliases.\n")
	for _, a := range aliases {
		fmt.Fprintf(b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
	}
}

// WriteHostsFile writes the pod's hosts file under podDir (mode 0644) and
// returns its path. It is written in place, as the kubelet does: a
// container's bind mount follows the file, not a replaced one.
func (c *Configurer) WriteHostsFile(podDir string, pod *corev1.Pod, podIPs []string) (string, error) {
	content, err := c.HostsFile(pod, podIPs)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(podDir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(podDir, HostsFileName)
	if err := os.WriteFile(path, content, 0o644); err != nil { //nolint:gosec // containers read it as any user
		return "", err
	}
	return path, os.Chmod(path, 0o644)
}
