package podruntime

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/services/podsyncd/internal/dns"
	"github.com/microlet/microlet/services/podsyncd/internal/securitycontext"
)

func namespaceOptions(pod *corev1.Pod) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
	if pod.Spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case pod.Spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace:
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	return ns
}

func (m *Manager) sandboxConfig(pod *corev1.Pod, attempt uint32) (*runtimeapi.PodSandboxConfig, error) {
	// A hostNetwork pod shares the node's UTS namespace: like the kubelet,
	// ask for no hostname (runc refuses to set one without a private UTS
	// namespace, so containerd fails such a sandbox).
	var hostname string
	if !pod.Spec.HostNetwork {
		clusterDomain := ""
		if m.opts.DNS != nil {
			clusterDomain = m.opts.DNS.ClusterDomain()
		}
		h, domain, err := dns.PodHostname(pod, clusterDomain)
		if err != nil {
			return nil, err
		}
		// spec.setHostnameAsFQDN: the FQDN, within the kernel's 64 bytes.
		if hostname, err = dns.KernelHostname(h, domain, pod.Spec.SetHostnameAsFQDN); err != nil {
			return nil, err
		}
	}
	var err error
	var dnsConfig *runtimeapi.DNSConfig
	if m.opts.DNS != nil {
		if dnsConfig, err = m.opts.DNS.PodDNS(pod); err != nil {
			return nil, err
		}
	}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID), Attempt: attempt},
		Hostname:     hostname,
		LogDirectory: PodLogDir(m.opts.LogRoot, pod.Namespace, pod.Name, pod.UID),
		Labels:       sandboxLabels(pod),
		Annotations:  pod.Annotations,
		DnsConfig:    dnsConfig,
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
	cfg.Linux.SecurityContext, cfg.Linux.Sysctls = securitycontext.Sandbox(pod, namespaceOptions(pod))
	if m.opts.CgroupParent != nil {
		cfg.Linux.CgroupParent = m.opts.CgroupParent(pod)
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort == 0 {
				continue
			}
			proto := runtimeapi.Protocol_TCP
			switch p.Protocol {
			case corev1.ProtocolUDP:
				proto = runtimeapi.Protocol_UDP
			case corev1.ProtocolSCTP:
				proto = runtimeapi.Protocol_SCTP
			}
			cfg.PortMappings = append(cfg.PortMappings, &runtimeapi.PortMapping{Protocol: proto, ContainerPort: p.ContainerPort, HostPort: p.HostPort, HostIp: p.HostIP})
		}
	}
	return cfg, nil
}

func (m *Manager) createSandbox(ctx context.Context, pod *corev1.Pod, attempt uint32) (string, error) {
	cfg, err := m.sandboxConfig(pod, attempt)
	if err != nil {
		return "", err
	}
	handler, err := m.runtimeHandler(pod)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		return "", fmt.Errorf("create pod log dir: %w", err)
	}
	id, err := m.rt.RunPodSandbox(ctx, cfg, handler)
	if err != nil {
		return "", err
	}
	m.log.Info("created sandbox", "pod", podRef(pod), "id", id, "attempt", attempt, "runtimeHandler", handler)
	return id, nil
}
