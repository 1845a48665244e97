package docker

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/services/runtime-shim/internal/checkpoint"
)

const labelCreated = "io.microlet.created"

// sandboxInfo is what the shim knows of a sandbox, from Docker or from its checkpoint.
type sandboxInfo struct {
	ID, Name, Namespace, UID string
	Attempt                  uint32
	Labels, Annotations      map[string]string
	CreatedAt                int64
	Ready                    bool
	InDocker                 bool
	IP                       string
	HostNetwork              bool
	HostPID, HostIPC         bool
	Pid                      int
	LogDir                   string
	RuntimeHandler           string
	ResolvConfPath           string // Docker's resolv.conf of the pause container
}

func (s *sandboxInfo) metadata() *runtimeapi.PodSandboxMetadata {
	return &runtimeapi.PodSandboxMetadata{Name: s.Name, Namespace: s.Namespace, Uid: s.UID, Attempt: s.Attempt}
}

func validateSandboxConfig(c *runtimeapi.PodSandboxConfig) error {
	if c == nil {
		return invalid("config", "is required")
	}
	m := c.GetMetadata()
	if m == nil {
		return invalid("config.metadata", "is required")
	}
	if m.Name == "" {
		return invalid("config.metadata.name", "is required")
	}
	if m.Namespace == "" {
		return invalid("config.metadata.namespace", "is required")
	}
	if m.Uid == "" {
		return invalid("config.metadata.uid", "is required")
	}
	if err := validateLogDirectory("config.log_directory", c.LogDirectory); err != nil {
		return err
	}
	for i, pm := range c.GetPortMappings() {
		if pm.ContainerPort <= 0 || pm.ContainerPort > 65535 {
			return invalid(fmt.Sprintf("config.port_mappings[%d].container_port", i), "must be 1-65535")
		}
		if pm.HostPort < 0 || pm.HostPort > 65535 {
			return invalid(fmt.Sprintf("config.port_mappings[%d].host_port", i), "must be 0-65535")
		}
	}
	return validateDNSConfig(c.GetDnsConfig())
}

func protoName(p runtimeapi.Protocol) string {
	switch p {
	case runtimeapi.Protocol_UDP:
		return "udp"
	case runtimeapi.Protocol_SCTP:
		return "sctp"
	}
	return "tcp"
}

// RunPodSandbox creates and starts the pod's pause container.
func (b *Backend) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	c := req.GetConfig()
	if err := validateSandboxConfig(c); err != nil {
		return nil, err
	}
	if err := b.checkRuntimeHandler(ctx, req.GetRuntimeHandler()); err != nil {
		return nil, err
	}
	if err := b.ensurePauseImage(ctx); err != nil {
		return nil, toStatus(err, "pause image")
	}
	m := c.Metadata
	name := b.sandboxName(m)

	// Idempotence: a retried RunPodSandbox finds the container by its name.
	if ins, err := b.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); err == nil {
		ct := ins.Container
		if ct.Config != nil && ct.Config.Labels[LabelInstance] == b.opts.Instance {
			// A shim killed between ContainerCreate and its checkpoint
			// left a container with none: write it before the start, so
			// stop, remove and list keep working if Docker loses the
			// container later.
			if err := b.ensureCheckpoint(req, ct.ID, name, ct.Config.Labels[labelCreated]); err != nil {
				return nil, toStatus(err, "checkpoint sandbox %s", name)
			}
			if ct.State == nil || !ct.State.Running {
				if _, err := b.cli.ContainerStart(ctx, ct.ID, client.ContainerStartOptions{}); err != nil {
					return nil, toStatus(err, "start existing sandbox %s", name)
				}
			}
			// Docker writes the file again at every start.
			if !dnsConfigEmpty(c.DnsConfig) {
				if err := b.writeSandboxDNS(ctx, ct.ID, c.DnsConfig); err != nil {
					return nil, err
				}
			}
			// A pause container started again has a new namespace to
			// attach; a running one is checked (CNI CHECK) and attached
			// again when something is missing.
			if b.opts.Network != nil && ct.HostConfig != nil && ct.HostConfig.NetworkMode == "none" {
				reattach := ct.State == nil || !ct.State.Running
				if !reattach {
					if err := b.opts.Network.Check(ctx, ct.ID); err != nil {
						b.log.Warn("pod network check failed; attaching the sandbox again", "sandbox", ct.ID, "err", err)
						reattach = true
					}
				}
				if reattach {
					if err := b.attachNetwork(ctx, ct.ID, c); err != nil {
						return nil, err
					}
				}
			}
			return &runtimeapi.RunPodSandboxResponse{PodSandboxId: ct.ID}, nil
		}
		return nil, toStatus(cerrdefs.ErrConflict.WithMessage("a container named "+name+" not managed by this shim exists"), "run sandbox")
	}

	created := time.Now().UnixNano()
	labels := map[string]string{
		LabelInstance:    b.opts.Instance,
		LabelType:        typeSandbox,
		LabelName:        m.Name,
		LabelNamespace:   m.Namespace,
		LabelUID:         m.Uid,
		LabelAttempt:     strconv.FormatUint(uint64(m.Attempt), 10),
		LabelCRILabels:   encodeMap(c.Labels),
		LabelAnnotations: encodeMap(c.Annotations),
		labelCreated:     strconv.FormatInt(created, 10),
	}
	if h := req.GetRuntimeHandler(); h != "" {
		labels[LabelRuntimeHandler] = h
	}
	ns := c.GetLinux().GetSecurityContext().GetNamespaceOptions()
	hostNet := ns.GetNetwork() == runtimeapi.NamespaceMode_NODE
	// With a network plugin a pod-network sandbox gets Docker's network
	// mode none and is attached by the plugin once started.
	pluginNet := b.opts.Network != nil && !hostNet
	if pluginNet {
		if err := b.opts.Network.Status(); err != nil {
			return nil, networkStatus(err, "set up pod network", name)
		}
	}
	cfg := &container.Config{
		Image:        b.opts.PauseImage,
		Labels:       labels,
		ExposedPorts: network.PortSet{},
	}
	hc := &container.HostConfig{
		NetworkMode:  "bridge",
		IpcMode:      "shareable",
		PortBindings: network.PortMap{},
		OomScoreAdj:  oomScoreAdj(-998),
		LogConfig:    container.LogConfig{Type: "none"},
		Runtime:      req.GetRuntimeHandler(),
	}
	if hostNet {
		hc.NetworkMode = "host"
	} else if pluginNet {
		hc.NetworkMode = "none"
	}
	if !hostNet && c.Hostname != "" {
		cfg.Hostname = c.Hostname
	}
	if ns.GetIpc() == runtimeapi.NamespaceMode_NODE {
		hc.IpcMode = "host"
	}
	if ns.GetPid() == runtimeapi.NamespaceMode_NODE {
		hc.PidMode = "host"
	}
	if !hostNet {
		for _, pm := range c.PortMappings {
			p, err := network.ParsePort(fmt.Sprintf("%d/%s", pm.ContainerPort, protoName(pm.Protocol)))
			if err != nil {
				return nil, invalid("config.port_mappings", err.Error())
			}
			if !pluginNet {
				cfg.ExposedPorts[p] = struct{}{}
			}
			if pm.HostPort > 0 && !pluginNet {
				pb := network.PortBinding{HostPort: strconv.Itoa(int(pm.HostPort))}
				if pm.HostIp != "" {
					ip, err := netip.ParseAddr(pm.HostIp)
					if err != nil {
						return nil, invalid("config.port_mappings.host_ip", "not an IP address")
					}
					pb.HostIP = ip
				}
				hc.PortBindings[p] = append(hc.PortBindings[p], pb)
			}
		}
	}
	// Docker refuses DNS settings with the host network and fills what a
	// config leaves empty from the host's file; every sandbox's resolv.conf
	// is rewritten once started (writeSandboxDNS), these only come close.
	if d := c.GetDnsConfig(); d != nil && !hostNet {
		for _, s := range d.Servers {
			a, _ := netip.ParseAddr(s)
			hc.DNS = append(hc.DNS, a)
		}
		hc.DNSSearch = d.Searches
		hc.DNSOptions = d.Options
	}
	if l := c.GetLinux(); l != nil {
		if len(l.Sysctls) > 0 {
			hc.Sysctls = l.Sysctls
		}
		hc.CgroupParent = dockerCgroupParent(l.CgroupParent)
		if sc := l.SecurityContext; sc != nil {
			hc.ReadonlyRootfs = sc.ReadonlyRootfs
			if sc.Privileged {
				applyPrivileged(hc)
			}
			const field = "config.linux.security_context"
			opt, err := seccompOpt(field+".seccomp", sc.Seccomp)
			if err != nil {
				return nil, err
			}
			hc.SecurityOpt = append(hc.SecurityOpt, opt...)
			// The pause process takes the pod's group only together with
			// its user; a group alone leaves the pause image's root user.
			if sc.RunAsUser != nil {
				if cfg.User, err = userSpec(field, sc.RunAsUser, "", sc.RunAsGroup); err != nil {
					return nil, err
				}
			}
			if hc.GroupAdd, err = groupAdd(field, sc.SupplementalGroups, sc.SupplementalGroupsPolicy); err != nil {
				return nil, err
			}
		}
	}

	res, err := b.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: name})
	if err != nil {
		return nil, toStatus(err, "create sandbox %s", name)
	}
	if err := b.cp.Put(sandboxCheckpoint(req, res.ID, name, created)); err != nil {
		_, _ = b.cli.ContainerRemove(context.WithoutCancel(ctx), res.ID, client.ContainerRemoveOptions{Force: true})
		return nil, toStatus(err, "checkpoint sandbox %s", name)
	}
	undo := func() {
		_, _ = b.cli.ContainerRemove(context.WithoutCancel(ctx), res.ID, client.ContainerRemoveOptions{Force: true})
		_ = b.cp.Delete(res.ID)
	}
	if _, err := b.cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		undo()
		return nil, toStatus(err, "start sandbox %s", name)
	}
	if !dnsConfigEmpty(c.DnsConfig) {
		if err := b.writeSandboxDNS(ctx, res.ID, c.DnsConfig); err != nil {
			undo()
			return nil, err
		}
	}
	if pluginNet {
		if err := b.attachNetwork(ctx, res.ID, c); err != nil {
			undo()
			return nil, err
		}
	}
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: res.ID}, nil
}

// inspectSandbox resolves id (full or prefix) to one of our sandboxes,
// from Docker, else from its checkpoint.
func (b *Backend) inspectSandbox(ctx context.Context, id string) (*sandboxInfo, error) {
	if id == "" {
		return nil, invalid("pod_sandbox_id", "is required")
	}
	ins, err := b.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err == nil && ins.Container.Config != nil && ins.Container.Config.Labels[LabelInstance] == b.opts.Instance && ins.Container.Config.Labels[LabelType] == typeSandbox {
		return b.sandboxFromInspect(ins.Container), nil
	}
	if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsInvalidArgument(err) {
		return nil, toStatus(err, "inspect sandbox %s", id)
	}
	cps, _ := b.cp.List()
	for _, cp := range cps {
		if cp.ID == id || (len(id) >= 6 && strings.HasPrefix(cp.ID, id)) {
			return sandboxFromCheckpoint(cp), nil
		}
	}
	return nil, notFound("pod sandbox", id)
}

func sandboxFromCheckpoint(cp checkpoint.Sandbox) *sandboxInfo {
	return &sandboxInfo{
		ID: cp.ID, Name: cp.PodName, Namespace: cp.Namespace, UID: cp.UID, Attempt: cp.Attempt,
		Labels: cp.Labels, Annotations: cp.Annotations, CreatedAt: cp.CreatedAt,
		HostNetwork: cp.HostNetwork, LogDir: cp.LogDir, RuntimeHandler: cp.RuntimeHandler,
	}
}

func (b *Backend) sandboxFromInspect(ct container.InspectResponse) *sandboxInfo {
	l := ct.Config.Labels
	s := &sandboxInfo{
		ID: ct.ID, Name: l[LabelName], Namespace: l[LabelNamespace], UID: l[LabelUID],
		Attempt: parseAttempt(l[LabelAttempt]), Labels: decodeMap(l[LabelCRILabels]),
		Annotations: decodeMap(l[LabelAnnotations]), InDocker: true,
		ResolvConfPath: ct.ResolvConfPath, RuntimeHandler: l[LabelRuntimeHandler],
	}
	s.CreatedAt, _ = strconv.ParseInt(l[labelCreated], 10, 64)
	if ct.State != nil {
		s.Ready = ct.State.Running
		s.Pid = ct.State.Pid
	}
	if hc := ct.HostConfig; hc != nil {
		s.HostNetwork = hc.NetworkMode == "host"
		s.HostPID = hc.PidMode == "host"
		s.HostIPC = hc.IpcMode == "host"
	}
	if ns := ct.NetworkSettings; ns != nil && !s.HostNetwork {
		for _, ep := range ns.Networks {
			if ep != nil && ep.IPAddress.IsValid() {
				s.IP = ep.IPAddress.String()
				break
			}
		}
	}
	if cp, err := b.cp.Get(ct.ID); err == nil {
		s.LogDir, s.RuntimeHandler = cp.LogDir, cp.RuntimeHandler
	}
	return s
}

// StopPodSandbox stops the pod's containers and its pause container. A
// sandbox that is already gone is not an error: the CRI defines stop as
// idempotent.
func (b *Backend) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	sb, err := b.inspectSandbox(ctx, req.PodSandboxId)
	if err != nil {
		if isNotFound(err) {
			return &runtimeapi.StopPodSandboxResponse{}, nil
		}
		return nil, err
	}
	cs, err := b.listDocker(ctx, typeContainer, LabelSandboxID+"="+sb.ID)
	if err != nil {
		return nil, toStatus(err, "list containers of sandbox %s", sb.ID)
	}
	for _, c := range cs {
		if c.State == container.StateRunning || c.State == container.StatePaused || c.State == container.StateRestarting {
			if err := b.stopContainer(ctx, c.ID, 10); err != nil {
				return nil, err
			}
		}
	}
	// Before the pause container stops: the plugins remove the pod's
	// devices from its namespace.
	if err := b.detachNetwork(ctx, sb.ID); err != nil {
		return nil, err
	}
	if sb.InDocker {
		t := 10
		if _, err := b.cli.ContainerStop(ctx, sb.ID, client.ContainerStopOptions{Timeout: &t}); err != nil && !cerrdefs.IsNotFound(err) {
			return nil, toStatus(err, "stop sandbox %s", sb.ID)
		}
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// RemovePodSandbox removes the pod's containers, its pause container and its
// checkpoint; a missing sandbox is not an error and removals Docker has in
// progress are waited for.
func (b *Backend) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	sb, err := b.inspectSandbox(ctx, req.PodSandboxId)
	if err != nil {
		if isNotFound(err) {
			return &runtimeapi.RemovePodSandboxResponse{}, nil
		}
		return nil, err
	}
	cs, err := b.listDocker(ctx, typeContainer, LabelSandboxID+"="+sb.ID)
	if err != nil {
		return nil, toStatus(err, "list containers of sandbox %s", sb.ID)
	}
	for _, c := range cs {
		if err := b.removeContainer(ctx, c.ID); err != nil {
			return nil, err
		}
	}
	if err := b.detachNetwork(ctx, sb.ID); err != nil {
		return nil, err
	}
	if sb.InDocker {
		if err := b.removeDocker(ctx, sb.ID); err != nil {
			return nil, toStatus(err, "remove sandbox %s", sb.ID)
		}
	}
	if err := b.cp.Delete(sb.ID); err != nil {
		return nil, toStatus(err, "delete checkpoint of %s", sb.ID)
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

func (b *Backend) toPodSandboxStatus(sb *sandboxInfo) *runtimeapi.PodSandboxStatus {
	st := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	if sb.Ready {
		st = runtimeapi.PodSandboxState_SANDBOX_READY
	}
	mode := func(host bool) runtimeapi.NamespaceMode {
		if host {
			return runtimeapi.NamespaceMode_NODE
		}
		return runtimeapi.NamespaceMode_POD
	}
	out := &runtimeapi.PodSandboxStatus{
		Id: sb.ID, Metadata: sb.metadata(), State: st, CreatedAt: sb.CreatedAt,
		Network: &runtimeapi.PodSandboxNetworkStatus{Ip: sb.IP},
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: &runtimeapi.NamespaceOption{
			Network: mode(sb.HostNetwork), Pid: mode(sb.HostPID), Ipc: mode(sb.HostIPC),
		}}},
		Labels: sb.Labels, Annotations: sb.Annotations, RuntimeHandler: sb.RuntimeHandler,
	}
	if b.opts.Network != nil && !sb.HostNetwork {
		if ips := b.opts.Network.PodIPs(sb.ID); len(ips) > 0 {
			out.Network.Ip = ips[0]
			for _, ip := range ips[1:] {
				out.Network.AdditionalIps = append(out.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
			}
		}
	}
	return out
}

// PodSandboxStatus reports the sandbox from Docker, or NOTREADY from its
// checkpoint when Docker lost the pause container.
func (b *Backend) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	sb, err := b.inspectSandbox(ctx, req.PodSandboxId)
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.PodSandboxStatusResponse{Status: b.toPodSandboxStatus(sb)}
	if req.Verbose {
		resp.Info = map[string]string{"info": fmt.Sprintf(`{"pid":%d,"inDocker":%t}`, sb.Pid, sb.InDocker)}
	}
	return resp, nil
}

// ListPodSandbox lists our sandboxes (Docker's and checkpoint-only ones) with the CRI filter.
func (b *Backend) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	items, err := b.listSandboxes(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxResponse{Items: items}, nil
}

func (b *Backend) listSandboxes(ctx context.Context, f *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	cs, err := b.listDocker(ctx, typeSandbox)
	if err != nil {
		return nil, toStatus(err, "list sandboxes")
	}
	seen := map[string]bool{}
	var out []*runtimeapi.PodSandbox
	add := func(p *runtimeapi.PodSandbox) {
		if f != nil {
			if f.Id != "" && !strings.HasPrefix(p.Id, f.Id) {
				return
			}
			if f.State != nil && f.State.State != p.State {
				return
			}
			if !matchLabels(f.LabelSelector, p.Labels) {
				return
			}
		}
		out = append(out, p)
	}
	for _, c := range cs {
		seen[c.ID] = true
		l := c.Labels
		p := &runtimeapi.PodSandbox{
			Id:       c.ID,
			Metadata: &runtimeapi.PodSandboxMetadata{Name: l[LabelName], Namespace: l[LabelNamespace], Uid: l[LabelUID], Attempt: parseAttempt(l[LabelAttempt])},
			State:    runtimeapi.PodSandboxState_SANDBOX_NOTREADY,
			Labels:   decodeMap(l[LabelCRILabels]), Annotations: decodeMap(l[LabelAnnotations]),
			RuntimeHandler: l[LabelRuntimeHandler],
		}
		p.CreatedAt, _ = strconv.ParseInt(l[labelCreated], 10, 64)
		if c.State == container.StateRunning {
			p.State = runtimeapi.PodSandboxState_SANDBOX_READY
		}
		add(p)
	}
	cps, _ := b.cp.List()
	for _, cp := range cps {
		if seen[cp.ID] {
			continue
		}
		sb := sandboxFromCheckpoint(cp)
		add(&runtimeapi.PodSandbox{Id: sb.ID, Metadata: sb.metadata(), State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY,
			CreatedAt: sb.CreatedAt, Labels: sb.Labels, Annotations: sb.Annotations, RuntimeHandler: sb.RuntimeHandler})
	}
	return out, nil
}

// listDocker lists our containers of one kind (all states), with extra label filters.
func (b *Backend) listDocker(ctx context.Context, kind string, extraLabels ...string) ([]container.Summary, error) {
	f := b.instanceFilter(kind)
	for _, l := range extraLabels {
		f.Add("label", l)
	}
	res, err := b.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, err
	}
	return res.Items, nil
}

func isNotFound(err error) bool { return status.Code(err) == codes.NotFound }

// dockerCgroupParent is a CRI cgroup parent as Docker takes it: the kubelet
// names systemd cgroups by their slice path
// ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice"),
// Docker's systemd driver wants the last slice's name; cgroupfs paths pass
// unchanged.
func dockerCgroupParent(p string) string {
	if strings.HasSuffix(p, ".slice") {
		return path.Base(p)
	}
	return p
}

// sandboxCheckpoint is the checkpoint of sandbox id (container name) made
// for req, created at created (Unix nanoseconds).
func sandboxCheckpoint(req *runtimeapi.RunPodSandboxRequest, id, name string, created int64) checkpoint.Sandbox {
	c := req.GetConfig()
	m := c.GetMetadata()
	hostNet := c.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE
	var ports []checkpoint.PortMapping
	if !hostNet {
		for _, pm := range c.GetPortMappings() {
			ports = append(ports, checkpoint.PortMapping{Protocol: protoName(pm.Protocol), ContainerPort: pm.ContainerPort, HostPort: pm.HostPort, HostIP: pm.HostIp})
		}
	}
	return checkpoint.Sandbox{
		ID: id, Name: name, PodName: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUid(), Attempt: m.GetAttempt(),
		Labels: c.Labels, Annotations: c.Annotations, Ports: ports, HostNetwork: hostNet,
		LogDir: c.LogDirectory, RuntimeHandler: req.RuntimeHandler, CreatedAt: created,
	}
}

// ensureCheckpoint writes sandbox id's checkpoint when it has none;
// createdLabel is the container's creation label (now when unreadable).
func (b *Backend) ensureCheckpoint(req *runtimeapi.RunPodSandboxRequest, id, name, createdLabel string) error {
	_, err := b.cp.Get(id)
	if !errors.Is(err, checkpoint.ErrNotFound) {
		return err
	}
	created, perr := strconv.ParseInt(createdLabel, 10, 64)
	if perr != nil {
		created = time.Now().UnixNano()
	}
	b.log.Warn("sandbox container has no checkpoint (the shim stopped while creating it); writing one", "sandbox", id, "name", name)
	return b.cp.Put(sandboxCheckpoint(req, id, name, created))
}
