package podruntime

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/services/podsyncd/internal/dns"
	"github.com/microlet/microlet/services/podsyncd/internal/envvars"
	"github.com/microlet/microlet/services/podsyncd/internal/resources"
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

// envFor resolves the container's environment; a missing required
// ConfigMap or Secret is an error (CreateContainerConfigError) until it appears.
func (m *Manager) envFor(ctx context.Context, pod *corev1.Pod, c *corev1.Container, info envvars.Info) ([]*runtimeapi.KeyValue, error) {
	vars, err := envvars.Resolve(ctx, pod, c, m.opts.Objects, info)
	if err != nil {
		return nil, err
	}
	out := make([]*runtimeapi.KeyValue, 0, len(vars))
	for _, v := range vars {
		out = append(out, &runtimeapi.KeyValue{Key: v.Name, Value: []byte(v.Value)})
	}
	return out, nil
}

// podInfo is what env and downward-API volumes need beyond the spec: the
// sandbox's IPs and the node's addresses and allocatable resources.
func (m *Manager) podInfo(ctx context.Context, sandboxID string) envvars.Info {
	info := envvars.Info{}
	if sandboxID != "" {
		if resp, err := m.rt.PodSandboxStatus(ctx, sandboxID, false); err == nil && resp.Status != nil && resp.Status.Network != nil {
			if ip := resp.Status.Network.Ip; ip != "" {
				info.PodIPs = append(info.PodIPs, ip)
			}
			for _, ip := range resp.Status.Network.AdditionalIps {
				info.PodIPs = append(info.PodIPs, ip.Ip)
			}
		}
	}
	m.mu.Lock()
	nodeInfo := m.nodeInfo
	m.mu.Unlock()
	if nodeInfo != nil {
		info.HostIPs, info.Allocatable = nodeInfo(ctx)
	}
	return info
}

// mounts turns the container's volumeMounts into CRI mounts over the pod's
// set-up volumes; env is the container's environment, for subPathExpr;
// images are the pulled images of its image volumes (imageVolumes).
func (m *Manager) mounts(pod *corev1.Pod, c *corev1.Container, env map[string]string, images map[string]*runtimeapi.ImageSpec) ([]*runtimeapi.Mount, error) {
	if len(c.VolumeMounts) == 0 {
		return nil, nil
	}
	if m.opts.Volumes == nil {
		return nil, fmt.Errorf("container %s: volume mounts need a data dir for volumes", c.Name)
	}
	vols := m.opts.Volumes.Paths(pod.UID)
	var out []*runtimeapi.Mount
	for _, vm := range c.VolumeMounts {
		v, ok := vols[vm.Name]
		if !ok {
			return nil, fmt.Errorf("container %s: volume %q is not set up", c.Name, vm.Name)
		}
		host := v.Path
		sub, err := mountSubPath(&vm, env)
		if err != nil {
			return nil, err
		}
		if v.Image {
			// The runtime mounts the image (its subPath directory) read-only.
			img, ok := images[vm.Name]
			if !ok {
				return nil, fmt.Errorf("container %s: image volume %q is not pulled", c.Name, vm.Name)
			}
			out = append(out, &runtimeapi.Mount{ContainerPath: vm.MountPath, Image: img, ImageSubPath: sub, Readonly: true})
			continue
		}
		if sub != "" {
			// A subPath through the atomic writer's links names the real
			// file (upstream's subPath mounts do not follow updates either).
			if host, err = prepareSubPath(v.Path, sub); err != nil {
				m.log.Warn("preparing subPath failed", "pod", podRef(pod), "container", c.Name, "volumeMount", vm.Name, "err", err)
				// As the kubelet, the host's paths stay out of the message.
				return nil, fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q", vm.Name, c.Name)
			}
		}
		mnt := &runtimeapi.Mount{ContainerPath: vm.MountPath, HostPath: host, Readonly: vm.ReadOnly || v.ReadOnly}
		if vm.MountPropagation != nil {
			switch *vm.MountPropagation {
			case corev1.MountPropagationHostToContainer:
				mnt.Propagation = runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
			case corev1.MountPropagationBidirectional:
				mnt.Propagation = runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
			}
		}
		out = append(out, mnt)
	}
	return out, nil
}

// expand is $(VAR) expansion of command and args.
func expand(s string, vals map[string]string) string { return envvars.Expand(s, vals) }

// containerConfig is the CRI config of c. target is the runtime ID of the
// container whose PID namespace an ephemeral container joins ("" for none).
func (m *Manager) containerConfig(ctx context.Context, pod *corev1.Pod, c *corev1.Container, kind containerKind, restarts int, imageRef, sandboxID, target string, images map[string]*runtimeapi.ImageSpec) (*runtimeapi.ContainerConfig, error) {
	info := m.podInfo(ctx, sandboxID)
	var err error
	if info.ServiceEnv, err = envvars.ServiceEnv(pod, m.opts.Services); err != nil {
		return nil, err
	}
	envs, err := m.envFor(ctx, pod, c, info)
	if err != nil {
		return nil, err
	}
	vals := map[string]string{}
	for _, e := range envs {
		vals[e.Key] = string(e.Value)
	}
	var cmd, args []string
	for _, s := range c.Command {
		cmd = append(cmd, expand(s, vals))
	}
	for _, s := range c.Args {
		args = append(args, expand(s, vals))
	}
	mounts, err := m.mounts(pod, c, vals, images)
	if err != nil {
		return nil, err
	}
	if hosts, err := m.hostsMount(pod, c, info.PodIPs); err != nil {
		return nil, err
	} else if hosts != nil {
		mounts = append(mounts, hosts)
	}
	image := c.Image
	if imageRef != "" {
		image = imageRef
	}
	user, err := m.imageUser(ctx, image)
	if err != nil {
		return nil, err
	}
	if err := securitycontext.VerifyNonRoot(pod, c, user); err != nil {
		return nil, err
	}
	ns := namespaceOptions(pod)
	// An ephemeral container with a target joins the target's PID
	// namespace, unless the pod already shares one (the pod's or the host's).
	if target != "" && ns.Pid == runtimeapi.NamespaceMode_CONTAINER {
		ns.Pid, ns.TargetId = runtimeapi.NamespaceMode_TARGET, target
	}
	sc, err := securitycontext.Container(pod, c, user, ns, m.opts.Security)
	if err != nil {
		return nil, err
	}
	// Last, so a configuration error leaves no message file behind.
	if term, err := m.terminationMessageMount(pod, c); err != nil {
		return nil, err
	} else if term != nil {
		mounts = append(mounts, term)
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: uint32(restarts)},
		Image:       &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: c.Image},
		Command:     cmd,
		Args:        args,
		WorkingDir:  c.WorkingDir,
		Envs:        envs,
		Mounts:      mounts,
		Labels:      containerLabels(pod, c, kind),
		Annotations: containerAnnotations(pod, c, restarts),
		LogPath:     containerLogPath(c.Name, restarts),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       resources.Container(pod, c, m.opts.MemoryCapacity),
			SecurityContext: sc,
		},
	}
	return cfg, nil
}

// hostsMount is the pod's managed /etc/hosts (<pod dir>/etc-hosts) for a
// container that does not mount /etc/hosts itself, rewritten with the
// sandbox's IPs before each container starts.
func (m *Manager) hostsMount(pod *corev1.Pod, c *corev1.Container, podIPs []string) (*runtimeapi.Mount, error) {
	if m.opts.DNS == nil || m.opts.Volumes == nil || !dns.MountsEtcHosts(pod, c, podIPs) {
		return nil, nil
	}
	path, err := m.opts.DNS.WriteHostsFile(m.opts.Volumes.PodDir(pod.UID), pod, podIPs)
	if err != nil {
		return nil, fmt.Errorf("managed %s: %w", dns.EtcHosts, err)
	}
	return &runtimeapi.Mount{ContainerPath: dns.EtcHosts, HostPath: path}, nil
}

func (m *Manager) createSandbox(ctx context.Context, pod *corev1.Pod, attempt uint32) (string, error) {
	cfg, err := m.sandboxConfig(pod, attempt)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		return "", fmt.Errorf("create pod log dir: %w", err)
	}
	id, err := m.rt.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		return "", err
	}
	m.log.Info("created sandbox", "pod", podRef(pod), "id", id, "attempt", attempt)
	return id, nil
}

// imageUser is the user the image runs as (the kubelet's getImageUser):
// it fills an unset runAsUser and decides runAsNonRoot.
func (m *Manager) imageUser(ctx context.Context, image string) (securitycontext.ImageUser, error) {
	resp, err := m.img.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: image}, false)
	if err != nil {
		return securitycontext.ImageUser{}, fmt.Errorf("cannot read the user of image %s: %w", image, err)
	}
	return securitycontext.FromImage(resp.Image), nil
}
