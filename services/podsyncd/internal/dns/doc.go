// Package dns builds a pod's resolver configuration and its managed
// /etc/hosts the way the kubelet does (pkg/kubelet/network/dns and the hosts
// file of kubelet_pods.go).
//
// dnsPolicy ClusterFirst uses the node's cluster DNS servers with the search
// path "<ns>.svc.<domain> svc.<domain> <domain>" followed by the host's and
// ndots:5; without cluster DNS it falls back to Default (the host's
// resolv.conf) with a MissingClusterDNS event. ClusterFirst on the host
// network is Default; ClusterFirstWithHostNet is ClusterFirst; None starts
// empty. A pod's dnsConfig is merged last, and the result is cut to the
// resolver's limits with upstream's DNSConfigForming warnings.
//
// PodHostname is the pod's hostname and domain; KernelHostname the name its
// sandbox gets: the FQDN when spec.setHostnameAsFQDN is set and the pod has a
// subdomain (at most 64 bytes, the kernel's limit), else the hostname.
//
//	c, err := dns.New(dns.Config{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local", ResolvConf: "/etc/resolv.conf"}, rec)
//	cfg, err := c.PodDNS(pod)                 // runtimeapi.DNSConfig for RunPodSandbox
//	hosts, err := c.HostsFile(pod, podIPs)     // content of <pod dir>/etc-hosts
package dns
