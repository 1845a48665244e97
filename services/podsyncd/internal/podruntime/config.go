package podruntime

import (
	"context"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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

func (m *Manager) sandboxConfig(pod *corev1.Pod, attempt uint32) *runtimeapi.PodSandboxConfig {
	hostname := pod.Name
	if pod.Spec.Hostname != "" {
		hostname = pod.Spec.Hostname
	}
	if pod.Spec.HostNetwork {
		if h, err := os.Hostname(); err == nil {
			hostname = h
		}
	}
	if len(hostname) > 63 {
		hostname = strings.TrimRight(hostname[:63], "-.")
	}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID), Attempt: attempt},
		Hostname:     hostname,
		LogDirectory: PodLogDir(m.opts.LogRoot, pod.Namespace, pod.Name, pod.UID),
		Labels:       sandboxLabels(pod),
		Annotations:  pod.Annotations,
		DnsConfig:    m.dnsConfig(pod),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: namespaceOptions(pod)},
		},
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
	if sc := pod.Spec.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			cfg.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: *sc.RunAsUser}
		}
		if sc.RunAsGroup != nil {
			cfg.Linux.SecurityContext.RunAsGroup = &runtimeapi.Int64Value{Value: *sc.RunAsGroup}
		}
		cfg.Linux.SecurityContext.SupplementalGroups = sc.SupplementalGroups
	}
	return cfg
}

// dnsConfig: ClusterFirst without a cluster DNS falls back to the node's
// resolver, as the kubelet does; None uses dnsConfig alone.
func (m *Manager) dnsConfig(pod *corev1.Pod) *runtimeapi.DNSConfig {
	out := &runtimeapi.DNSConfig{}
	if pod.Spec.DNSPolicy != corev1.DNSNone && m.opts.DNS != nil {
		out.Servers = append(out.Servers, m.opts.DNS.Servers...)
		out.Searches = append(out.Searches, m.opts.DNS.Searches...)
		out.Options = append(out.Options, m.opts.DNS.Options...)
	}
	if dc := pod.Spec.DNSConfig; dc != nil {
		out.Servers = append(out.Servers, dc.Nameservers...)
		out.Searches = append(out.Searches, dc.Searches...)
		for _, o := range dc.Options {
			if o.Value != nil {
				out.Options = append(out.Options, o.Name+":"+*o.Value)
			} else {
				out.Options = append(out.Options, o.Name)
			}
		}
	}
	if len(out.Servers) == 0 && len(out.Searches) == 0 && len(out.Options) == 0 {
		return nil
	}
	return out
}

// envFor resolves env values the node can know without the API (literal
// values and the pod's own fields); references to ConfigMaps and Secrets are a
// configuration error until volumes and env sources are supported.
func envFor(pod *corev1.Pod, c *corev1.Container) ([]*runtimeapi.KeyValue, error) {
	var out []*runtimeapi.KeyValue
	vals := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			switch {
			case e.ValueFrom.FieldRef != nil:
				var err error
				v, err = fieldValue(pod, e.ValueFrom.FieldRef.FieldPath)
				if err != nil {
					return nil, fmt.Errorf("env %s: %w", e.Name, err)
				}
			default:
				return nil, fmt.Errorf("env %s: only value and fieldRef sources are supported by this node", e.Name)
			}
		} else {
			v = expand(v, vals)
		}
		vals[e.Name] = v
		out = append(out, &runtimeapi.KeyValue{Key: e.Name, Value: []byte(v)})
	}
	if len(c.EnvFrom) > 0 {
		return nil, fmt.Errorf("envFrom is not supported by this node")
	}
	return out, nil
}

func fieldValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	}
	if strings.HasPrefix(path, "metadata.labels['") && strings.HasSuffix(path, "']") {
		return pod.Labels[strings.TrimSuffix(strings.TrimPrefix(path, "metadata.labels['"), "']")], nil
	}
	if strings.HasPrefix(path, "metadata.annotations['") && strings.HasSuffix(path, "']") {
		return pod.Annotations[strings.TrimSuffix(strings.TrimPrefix(path, "metadata.annotations['"), "']")], nil
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

// expand replaces $(VAR) with earlier values; $$ escapes, unknown stays as is.
func expand(s string, vals map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vals[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

func (m *Manager) containerConfig(pod *corev1.Pod, c *corev1.Container, init bool, restarts int, imageRef string) (*runtimeapi.ContainerConfig, error) {
	envs, err := envFor(pod, c)
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
	if len(c.VolumeMounts) > 0 {
		return nil, fmt.Errorf("container %s: volume mounts are not supported by this node yet", c.Name)
	}
	image := c.Image
	if imageRef != "" {
		image = imageRef
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: uint32(restarts)},
		Image:       &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: c.Image},
		Command:     cmd,
		Args:        args,
		WorkingDir:  c.WorkingDir,
		Envs:        envs,
		Labels:      containerLabels(pod, c, init),
		Annotations: containerAnnotations(pod, c, restarts),
		LogPath:     containerLogPath(c.Name, restarts),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       resources(c),
			SecurityContext: securityContext(pod, c),
		},
	}
	return cfg, nil
}

// resources maps requests and limits to cgroup settings the kubelet's way:
// shares from the CPU request (or limit), quota from the CPU limit.
func resources(c *corev1.Container) *runtimeapi.LinuxContainerResources {
	r := &runtimeapi.LinuxContainerResources{CpuShares: 2}
	cpuReq := c.Resources.Requests.Cpu()
	cpuLim := c.Resources.Limits.Cpu()
	if cpuReq.IsZero() && !cpuLim.IsZero() {
		cpuReq = cpuLim
	}
	if !cpuReq.IsZero() {
		shares := cpuReq.MilliValue() * 1024 / 1000
		if shares < 2 {
			shares = 2
		}
		r.CpuShares = shares
	}
	if !cpuLim.IsZero() {
		r.CpuPeriod = 100000
		r.CpuQuota = cpuLim.MilliValue() * 100000 / 1000
		if r.CpuQuota < 1000 {
			r.CpuQuota = 1000
		}
	}
	if mem := c.Resources.Limits.Memory(); !mem.IsZero() {
		r.MemoryLimitInBytes = mem.Value()
	}
	return r
}

func securityContext(pod *corev1.Pod, c *corev1.Container) *runtimeapi.LinuxContainerSecurityContext {
	sc := &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: namespaceOptions(pod)}
	if psc := pod.Spec.SecurityContext; psc != nil {
		if psc.RunAsUser != nil {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: *psc.RunAsUser}
		}
		if psc.RunAsGroup != nil {
			sc.RunAsGroup = &runtimeapi.Int64Value{Value: *psc.RunAsGroup}
		}
		sc.SupplementalGroups = psc.SupplementalGroups
	}
	csc := c.SecurityContext
	if csc == nil {
		return sc
	}
	if csc.RunAsUser != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *csc.RunAsUser}
	}
	if csc.RunAsGroup != nil {
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: *csc.RunAsGroup}
	}
	if csc.Privileged != nil {
		sc.Privileged = *csc.Privileged
	}
	if csc.ReadOnlyRootFilesystem != nil {
		sc.ReadonlyRootfs = *csc.ReadOnlyRootFilesystem
	}
	if csc.AllowPrivilegeEscalation != nil {
		sc.NoNewPrivs = !*csc.AllowPrivilegeEscalation
	}
	if caps := csc.Capabilities; caps != nil {
		sc.Capabilities = &runtimeapi.Capability{}
		for _, a := range caps.Add {
			sc.Capabilities.AddCapabilities = append(sc.Capabilities.AddCapabilities, string(a))
		}
		for _, d := range caps.Drop {
			sc.Capabilities.DropCapabilities = append(sc.Capabilities.DropCapabilities, string(d))
		}
	}
	return sc
}

func (m *Manager) createSandbox(ctx context.Context, pod *corev1.Pod, attempt uint32) (string, error) {
	cfg := m.sandboxConfig(pod, attempt)
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		return "", fmt.Errorf("create pod log dir: %w", err)
	}
	resp, err := m.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return "", err
	}
	m.log.Info("created sandbox", "pod", podRef(pod), "id", resp.PodSandboxId, "attempt", attempt)
	return resp.PodSandboxId, nil
}
