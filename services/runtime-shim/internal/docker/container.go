package docker

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"github.com/prometheus/procfs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"

	"github.com/microlet/microlet/services/runtime-shim/internal/imagevolume"
)

func validateContainerConfig(c *runtimeapi.ContainerConfig) error {
	if c == nil {
		return invalid("config", "is required")
	}
	if c.GetMetadata() == nil {
		return invalid("config.metadata", "is required")
	}
	if c.Metadata.Name == "" {
		return invalid("config.metadata.name", "is required")
	}
	if c.GetImage().GetImage() == "" {
		return invalid("config.image.image", "is required")
	}
	for i, m := range c.Mounts {
		if err := bindPath(fmt.Sprintf("config.mounts[%d].container_path", i), m.ContainerPath); err != nil {
			return err
		}
		if m.GetImage().GetImage() != "" {
			// An image volume: the image's filesystem, no host path.
			if m.HostPath != "" {
				return invalid(fmt.Sprintf("config.mounts[%d].host_path", i), "must be empty for an image mount")
			}
			if err := imagevolume.CheckSubPath(m.GetImageSubPath()); err != nil {
				return invalid(fmt.Sprintf("config.mounts[%d].image_sub_path", i), err.Error())
			}
			continue
		}
		if err := bindPath(fmt.Sprintf("config.mounts[%d].host_path", i), m.HostPath); err != nil {
			return err
		}
		if err := validateRRO(fmt.Sprintf("config.mounts[%d]", i), m); err != nil {
			return err
		}
	}
	if c.LogPath != "" && !filepath.IsLocal(c.LogPath) {
		return invalid("config.log_path", fmt.Sprintf("%q: must be relative to the sandbox's log directory and stay inside it", c.LogPath))
	}
	for i, e := range c.Envs {
		// Docker takes NAME=value: a name with '=' would swallow part
		// of its value into the name.
		if e.Key == "" || strings.ContainsAny(e.Key, "=\x00") {
			return invalid(fmt.Sprintf("config.envs[%d].key", i), fmt.Sprintf("%q: must be non-empty, without '=' or NUL", e.Key))
		}
	}
	return nil
}

// bindPath checks one side of a bind mount: absolute, and without ':',
// which Docker's bind syntax (host:container:options) would split on.
func bindPath(field, p string) error {
	if p == "" || !filepath.IsAbs(p) {
		return invalid(field, fmt.Sprintf("%q: must be an absolute path", p))
	}
	if strings.Contains(p, ":") {
		return invalid(field, fmt.Sprintf("%q: must not contain ':' (Docker's bind syntax host:container:options)", p))
	}
	return nil
}

// validateLogDirectory checks a sandbox's log directory: empty, or
// absolute (a relative one would be the shim's working directory's).
func validateLogDirectory(field, dir string) error {
	if dir != "" && !filepath.IsAbs(dir) {
		return invalid(field, fmt.Sprintf("%q: must be an absolute path", dir))
	}
	return nil
}

func nsMode(mode runtimeapi.NamespaceMode, sandboxID string) string {
	switch mode {
	case runtimeapi.NamespaceMode_NODE:
		return "host"
	case runtimeapi.NamespaceMode_POD:
		return "container:" + sandboxID
	}
	return ""
}

// pidTarget resolves the container whose PID namespace a TARGET container
// joins (an ephemeral container with targetContainerName): one of this
// shim's containers, in the same sandbox, running, as containerd demands.
// Docker joins it with PidMode container:<id>.
func (b *Backend) pidTarget(ctx context.Context, sandboxID, targetID string) (string, error) {
	const field = "config.linux.security_context.namespace_options.target_id"
	if targetID == "" {
		return "", invalid(field, "is required with pid mode TARGET")
	}
	ct, err := b.inspectContainer(ctx, targetID)
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return "", status.Errorf(codes.NotFound, "%s: target container %q not found", field, targetID)
		}
		return "", err
	}
	if ct.Config.Labels[LabelSandboxID] != sandboxID {
		return "", invalid(field, fmt.Sprintf("target container %s belongs to another sandbox", ct.ID))
	}
	if ct.State == nil || !ct.State.Running {
		return "", status.Errorf(codes.FailedPrecondition, "%s: target container %s is not running", field, ct.ID)
	}
	return ct.ID, nil
}

// CreateContainer creates a container in the sandbox's namespaces.
func (b *Backend) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	c := req.GetConfig()
	if err := validateContainerConfig(c); err != nil {
		return nil, err
	}
	if err := validateLogDirectory("sandbox_config.log_directory", req.GetSandboxConfig().GetLogDirectory()); err != nil {
		return nil, err
	}
	sb, err := b.inspectSandbox(ctx, req.PodSandboxId)
	if err != nil {
		return nil, err
	}
	if !sb.InDocker {
		return nil, status.Errorf(codes.FailedPrecondition, "pod sandbox %s has no pause container; run a new sandbox", sb.ID)
	}
	name := b.containerName(sb, c.Metadata)
	if ins, err := b.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); err == nil {
		if ins.Container.Config != nil && ins.Container.Config.Labels[LabelInstance] == b.opts.Instance {
			// The name is the pod's and the attempt's, not the sandbox's:
			// a container of an older sandbox of the pod is not this one.
			if other := ins.Container.Config.Labels[LabelSandboxID]; other != sb.ID {
				return nil, status.Errorf(codes.AlreadyExists, "container %s (attempt %d) already exists in sandbox %s", c.Metadata.Name, c.Metadata.Attempt, other)
			}
			return &runtimeapi.CreateContainerResponse{ContainerId: ins.Container.ID}, nil
		}
		return nil, status.Errorf(codes.AlreadyExists, "a container named %s not managed by this shim exists", name)
	}

	logPath := ""
	if dir := req.GetSandboxConfig().GetLogDirectory(); dir != "" && c.LogPath != "" {
		logPath = filepath.Join(dir, c.LogPath)
	} else if sb.LogDir != "" && c.LogPath != "" {
		logPath = filepath.Join(sb.LogDir, c.LogPath)
	}
	labels := map[string]string{
		LabelInstance:    b.opts.Instance,
		LabelType:        typeContainer,
		LabelSandboxID:   sb.ID,
		LabelName:        c.Metadata.Name,
		LabelAttempt:     strconv.FormatUint(uint64(c.Metadata.Attempt), 10),
		LabelCRILabels:   encodeMap(c.Labels),
		LabelAnnotations: encodeMap(c.Annotations),
		LabelLogPath:     logPath,
		LabelImage:       c.Image.Image,
		LabelPodName:     sb.Name,
		LabelPodNS:       sb.Namespace,
		LabelPodUID:      sb.UID,
		labelCreated:     strconv.FormatInt(time.Now().UnixNano(), 10),
	}
	if v, ok := encodeImageMounts(c.Mounts); ok {
		labels[LabelImageMounts] = v
	}
	env := make([]string, 0, len(c.Envs))
	for _, e := range c.Envs {
		env = append(env, e.Key+"="+string(e.Value))
	}
	cfg := &container.Config{
		Image:        c.Image.Image,
		Env:          env,
		WorkingDir:   c.WorkingDir,
		Labels:       labels,
		Tty:          c.Tty,
		OpenStdin:    c.Stdin,
		StdinOnce:    c.StdinOnce,
		AttachStdin:  c.Stdin,
		AttachStdout: true,
		AttachStderr: true,
	}
	if len(c.Command) > 0 {
		cfg.Entrypoint = c.Command
	}
	if len(c.Args) > 0 {
		cfg.Cmd = c.Args
	}
	hc := &container.HostConfig{
		LogConfig: b.containerLogConfig(),
		// The pod's containers run with its sandbox's runtime (handlers.go).
		Runtime: sb.RuntimeHandler,
	}
	ns := c.GetLinux().GetSecurityContext().GetNamespaceOptions()
	hc.NetworkMode = container.NetworkMode("container:" + sb.ID)
	if sb.HostNetwork {
		hc.NetworkMode = "host"
	}
	hc.IpcMode = container.IpcMode(nsMode(ns.GetIpc(), sb.ID))
	if hc.IpcMode == "" {
		hc.IpcMode = "private"
	}
	hc.PidMode = container.PidMode(nsMode(ns.GetPid(), sb.ID))
	if ns.GetPid() == runtimeapi.NamespaceMode_TARGET {
		target, err := b.pidTarget(ctx, sb.ID, ns.TargetId)
		if err != nil {
			return nil, err
		}
		hc.PidMode = container.PidMode("container:" + target)
	}
	var feat *daemonFeatures
	if needsFeatures(c) {
		if feat, err = b.features(ctx); err != nil {
			return nil, err
		}
	}
	for i, m := range c.Mounts {
		mode := "rw"
		if m.Readonly {
			mode = "ro"
		}
		if m.GetImage().GetImage() != "" {
			src, err := b.imageVolumePath(ctx, i, m)
			if err != nil {
				return nil, err
			}
			// Always read-only: the extraction is shared by every
			// container that mounts the image.
			hc.Binds = append(hc.Binds, src+":"+m.ContainerPath+":ro,rprivate")
			continue
		}
		propagation := mount.PropagationRPrivate
		switch m.Propagation {
		case runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
			propagation = mount.PropagationRSlave
		case runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
			propagation = mount.PropagationRShared
		}
		if m.RecursiveReadOnly && !feat.recursiveReadOnly() {
			return nil, feat.unsupportedRRO(fmt.Sprintf("config.mounts[%d]", i))
		}
		if m.Readonly && feat.bindOptions() {
			hc.Mounts = append(hc.Mounts, bindMount(m, propagation))
			continue
		}
		hc.Binds = append(hc.Binds, m.HostPath+":"+m.ContainerPath+":"+mode+","+string(propagation))
	}
	for _, d := range c.Devices {
		hc.Devices = append(hc.Devices, container.DeviceMapping{PathOnHost: d.HostPath, PathInContainer: d.ContainerPath, CgroupPermissions: d.Permissions})
	}
	if l := c.GetLinux(); l != nil {
		applyResources(&hc.Resources, l.Resources)
		if r := l.Resources; r != nil {
			hc.OomScoreAdj = oomScoreAdj(int(r.OomScoreAdj))
		}
		if sc := l.SecurityContext; sc != nil {
			if err := applySecurity(cfg, hc, sc); err != nil {
				return nil, err
			}
		}
	}
	if c.GetLinux().GetSecurityContext() == nil {
		opt, _ := seccompOpt("", nil)
		hc.SecurityOpt = append(hc.SecurityOpt, opt...)
	}
	if sb.HostNetwork && sb.ResolvConfPath != "" && !slices.ContainsFunc(c.Mounts, func(m *runtimeapi.Mount) bool { return m.ContainerPath == resolvConfTarget }) {
		// A host-network container would get its own copy of the host's
		// file; it shares the pause container's, as pod-network ones do
		// through container:<pause>, so the pod's DNS config reaches it.
		// rslave: Docker refuses private propagation for a source inside
		// its root dir.
		mode := "rw"
		if hc.ReadonlyRootfs {
			mode = "ro"
		}
		hc.Binds = append(hc.Binds, sb.ResolvConfPath+":"+resolvConfTarget+":"+mode+",rslave")
	}
	if hc.CgroupParent == "" {
		hc.CgroupParent = dockerCgroupParent(req.GetSandboxConfig().GetLinux().GetCgroupParent())
	}
	res, err := b.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: name})
	if err != nil {
		return nil, toStatus(err, "create container %s", name)
	}
	return &runtimeapi.CreateContainerResponse{ContainerId: res.ID}, nil
}

func applyResources(r *container.Resources, lr *runtimeapi.LinuxContainerResources) {
	if lr == nil {
		return
	}
	r.CPUShares = lr.CpuShares
	r.CPUQuota = lr.CpuQuota
	r.CPUPeriod = lr.CpuPeriod
	r.Memory = lr.MemoryLimitInBytes
	if lr.MemoryLimitInBytes > 0 {
		// Without swap accounting settings Docker would allow twice the limit.
		r.MemorySwap = lr.MemoryLimitInBytes
		if lr.MemorySwapLimitInBytes > lr.MemoryLimitInBytes {
			r.MemorySwap = lr.MemorySwapLimitInBytes
		}
	}
	r.CpusetCpus = lr.CpusetCpus
	r.CpusetMems = lr.CpusetMems
}

// capNames maps capability numbers to Docker's names.
var capNames = []string{
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
	"IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
	"SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
	"LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
	"WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ",
	// PERFMON, BPF and CHECKPOINT_RESTORE (38-40) are left out: Docker 20.10
	// rejects them as unknown.
}

// boundingCaps returns the capabilities the Docker daemon can hand out,
// taken from our own bounding set (the daemon runs on the same host).
func boundingCaps() []string {
	self, err := procfs.Self()
	if err != nil {
		return []string{"ALL"}
	}
	status, err := self.NewStatus()
	if err != nil {
		return []string{"ALL"}
	}
	var out []string
	for i, n := range capNames {
		if status.CapBnd&(1<<uint(i)) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// applyPrivileged gives a container what --privileged gives, except that it
// grants only the capabilities in the host's bounding set: Docker's own
// --privileged asks for every capability and fails on hosts (like CI
// containers) whose bounding set lacks some, such as CAP_SYS_RESOURCE.
func applyPrivileged(hc *container.HostConfig) {
	hc.CapAdd = boundingCaps()
	hc.SecurityOpt = append(hc.SecurityOpt, "seccomp=unconfined", "apparmor=unconfined", "label=disable")
	hc.MaskedPaths = []string{}
	hc.ReadonlyPaths = []string{}
	if entries, err := os.ReadDir("/dev"); err == nil {
		for _, e := range entries {
			if e.Type()&os.ModeDevice != 0 && e.Type()&os.ModeCharDevice != 0 {
				switch e.Name() {
				case "null", "zero", "full", "random", "urandom", "tty", "console", "ptmx":
					continue
				}
				p := "/dev/" + e.Name()
				hc.Devices = append(hc.Devices, container.DeviceMapping{PathOnHost: p, PathInContainer: p, CgroupPermissions: "rwm"})
			}
		}
	}
}

// canLowerOOM is whether the host lets containers lower their OOM score:
// that needs CAP_SYS_RESOURCE, which CI containers often lack.
var canLowerOOM = func() bool {
	for _, c := range boundingCaps() {
		if c == "SYS_RESOURCE" || c == "ALL" {
			return true
		}
	}
	return false
}()

// oomScoreAdj clamps a negative score to 0 where it cannot be set, instead
// of letting runc fail the start.
func oomScoreAdj(v int) int {
	if v < 0 && !canLowerOOM {
		return 0
	}
	return v
}

// seccompOpt maps the CRI's seccomp profile onto Docker's option. No profile
// at all means unconfined in the CRI (the kubelet asks for RuntimeDefault
// explicitly), while Docker would apply its default profile. A Localhost
// profile is read here (Docker takes the profile's JSON, not a path); a
// profile that cannot be read is refused, never silently replaced.
func seccompOpt(field string, p *runtimeapi.SecurityProfile) ([]string, error) {
	switch {
	case p == nil || p.ProfileType == runtimeapi.SecurityProfile_Unconfined:
		return []string{"seccomp=unconfined"}, nil
	case p.ProfileType == runtimeapi.SecurityProfile_Localhost:
		if p.LocalhostRef == "" || !filepath.IsAbs(p.LocalhostRef) {
			return nil, invalid(field+".localhost_ref", "must be the absolute path of a seccomp profile")
		}
		b, err := os.ReadFile(p.LocalhostRef)
		if err != nil {
			return nil, invalid(field+".localhost_ref", fmt.Sprintf("cannot load seccomp profile %q: %v", p.LocalhostRef, err))
		}
		return []string{"seccomp=" + string(b)}, nil
	}
	return nil, nil
}

// userSpec is Docker's "user[:group]" from a CRI user, user name and group.
func userSpec(field string, uid *runtimeapi.Int64Value, name string, gid *runtimeapi.Int64Value) (string, error) {
	user := ""
	switch {
	case uid != nil:
		user = strconv.FormatInt(uid.Value, 10)
	case name != "":
		user = name
	}
	if gid != nil {
		if user == "" {
			return "", invalid(field+".run_as_group", "needs run_as_user or run_as_username")
		}
		user += ":" + strconv.FormatInt(gid.Value, 10)
	}
	return user, nil
}

// groupAdd is Docker's GroupAdd from the CRI's supplemental groups. Docker
// (like runc) always adds the groups /etc/group gives the user, so only the
// Merge policy can be honoured.
func groupAdd(field string, groups []int64, policy runtimeapi.SupplementalGroupsPolicy) ([]string, error) {
	if policy == runtimeapi.SupplementalGroupsPolicy_Strict {
		return nil, invalid(field+".supplemental_groups_policy", "Strict is not supported by Docker, which always merges the groups of the image's /etc/group")
	}
	out := make([]string, 0, len(groups))
	for _, g := range groups {
		out = append(out, strconv.FormatInt(g, 10))
	}
	return out, nil
}

func applySecurity(cfg *container.Config, hc *container.HostConfig, sc *runtimeapi.LinuxContainerSecurityContext) error {
	if sc.Privileged {
		applyPrivileged(hc)
	} else {
		if sc.Capabilities != nil {
			for _, c := range sc.Capabilities.AddCapabilities {
				c = strings.TrimPrefix(strings.ToUpper(c), "CAP_")
				if c == "ALL" {
					// Docker's ALL includes capabilities the host may
					// not grant; ask for the host's bounding set instead.
					hc.CapAdd = append(hc.CapAdd, boundingCaps()...)
					continue
				}
				hc.CapAdd = append(hc.CapAdd, c)
			}
			for _, c := range sc.Capabilities.DropCapabilities {
				hc.CapDrop = append(hc.CapDrop, strings.TrimPrefix(strings.ToUpper(c), "CAP_"))
			}
			if len(sc.Capabilities.AddAmbientCapabilities) > 0 {
				return invalid("config.linux.security_context.capabilities.add_ambient_capabilities", "not supported by Docker")
			}
		}
		opt, err := seccompOpt("config.linux.security_context.seccomp", sc.Seccomp)
		if err != nil {
			return err
		}
		hc.SecurityOpt = append(hc.SecurityOpt, opt...)
		if sc.MaskedPaths != nil {
			hc.MaskedPaths = sc.MaskedPaths
		}
		if sc.ReadonlyPaths != nil {
			hc.ReadonlyPaths = sc.ReadonlyPaths
		}
	}
	if a := sc.Apparmor; a != nil && a.ProfileType == runtimeapi.SecurityProfile_Unconfined {
		hc.SecurityOpt = append(hc.SecurityOpt, "apparmor=unconfined")
	}
	if sc.NoNewPrivs {
		hc.SecurityOpt = append(hc.SecurityOpt, "no-new-privileges")
	}
	hc.ReadonlyRootfs = sc.ReadonlyRootfs
	const field = "config.linux.security_context"
	user, err := userSpec(field, sc.RunAsUser, sc.RunAsUsername, sc.RunAsGroup)
	if err != nil {
		return err
	}
	cfg.User = user
	hc.GroupAdd, err = groupAdd(field, sc.SupplementalGroups, sc.SupplementalGroupsPolicy)
	return err
}

// inspectContainer resolves id to one of our (non-sandbox) containers.
func (b *Backend) inspectContainer(ctx context.Context, id string) (container.InspectResponse, error) {
	if id == "" {
		return container.InspectResponse{}, invalid("container_id", "is required")
	}
	ins, err := b.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) || cerrdefs.IsInvalidArgument(err) {
			return container.InspectResponse{}, notFound("container", id)
		}
		return container.InspectResponse{}, toStatus(err, "inspect container %s", id)
	}
	l := ins.Container.Config.Labels
	if l[LabelInstance] != b.opts.Instance || l[LabelType] != typeContainer {
		return container.InspectResponse{}, notFound("container", id)
	}
	return ins.Container, nil
}

// StartContainer starts the container and its CRI log follower.
func (b *Backend) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	ct, err := b.inspectContainer(ctx, req.ContainerId)
	if err != nil {
		return nil, err
	}
	if ct.State != nil && ct.State.Status != container.StateCreated {
		return nil, status.Errorf(codes.FailedPrecondition, "container %s is %s, not created", ct.ID, ct.State.Status)
	}
	logPath := ct.Config.Labels[LabelLogPath]
	if logPath != "" {
		// Create the file before the start, so a caller finds it at once.
		if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
			return nil, status.Errorf(codes.Internal, "log dir: %v", err)
		}
	}
	if _, err := b.cli.ContainerStart(ctx, ct.ID, client.ContainerStartOptions{}); err != nil {
		return nil, toStatus(err, "start container %s", ct.ID)
	}
	if logPath != "" {
		// Docker names its log file at start.
		jsonPath := ct.LogPath
		if ins, err := b.cli.ContainerInspect(ctx, ct.ID, client.ContainerInspectOptions{}); err == nil {
			jsonPath = ins.Container.LogPath
		}
		if err := b.startFollower(ct.ID, logPath, jsonPath); err != nil {
			b.log.Warn("CRI log follower not started", "container", ct.ID, "path", logPath, "err", err)
		}
	}
	return &runtimeapi.StartContainerResponse{}, nil
}

func (b *Backend) stopContainer(ctx context.Context, id string, timeout int64) error {
	t := int(timeout)
	if _, err := b.cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &t}); err != nil && !cerrdefs.IsNotFound(err) {
		return toStatus(err, "stop container %s", id)
	}
	b.waitFollower(id, 5*time.Second)
	return nil
}

// StopContainer stops the container within the grace period; stopping a
// missing or stopped container succeeds.
func (b *Backend) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	ct, err := b.inspectContainer(ctx, req.ContainerId)
	if err != nil {
		if isNotFound(err) {
			return &runtimeapi.StopContainerResponse{}, nil
		}
		return nil, err
	}
	if err := b.stopContainer(ctx, ct.ID, req.Timeout); err != nil {
		return nil, err
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

func (b *Backend) removeContainer(ctx context.Context, id string) error {
	b.dropFollower(id)
	if err := b.removeDocker(ctx, id); err != nil {
		return toStatus(err, "remove container %s", id)
	}
	b.users.Delete(id)
	return nil
}

// removeBackoff spaces the tries while Docker finishes a removal already in
// progress.
var removeBackoff = wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Steps: math.MaxInt32, Cap: time.Second}

// removeDocker force-removes a Docker container; one already gone is
// removed. When Docker is removing it already (a concurrent CRI call, HTTP
// 409 "removal of container ... is already in progress"), it waits for that
// removal instead of failing, as CRI removals are idempotent: it tries again
// until the container is gone or the other removal failed and this one
// goes through, within ctx.
func (b *Backend) removeDocker(ctx context.Context, id string) error {
	delay := removeBackoff.DelayFunc()
	for {
		_, err := b.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		switch {
		case err == nil, cerrdefs.IsNotFound(err):
			return nil
		case !cerrdefs.IsConflict(err) || !strings.Contains(err.Error(), "already in progress"):
			return err
		}
		t := time.NewTimer(delay())
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for the removal in progress: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// RemoveContainer force-removes the container; a missing one is not an error
// and one Docker is removing already is waited for.
// The CRI log file stays: the kubelet removes log files itself.
func (b *Backend) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	ct, err := b.inspectContainer(ctx, req.ContainerId)
	if err != nil {
		if isNotFound(err) {
			return &runtimeapi.RemoveContainerResponse{}, nil
		}
		return nil, err
	}
	if err := b.removeContainer(ctx, ct.ID); err != nil {
		return nil, err
	}
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func containerState(s container.ContainerState) runtimeapi.ContainerState {
	switch s {
	case container.StateCreated:
		return runtimeapi.ContainerState_CONTAINER_CREATED
	case container.StateRunning, container.StatePaused, container.StateRestarting:
		return runtimeapi.ContainerState_CONTAINER_RUNNING
	case container.StateExited, container.StateDead, container.StateRemoving:
		return runtimeapi.ContainerState_CONTAINER_EXITED
	}
	return runtimeapi.ContainerState_CONTAINER_UNKNOWN
}

func containerMeta(l map[string]string) *runtimeapi.ContainerMetadata {
	return &runtimeapi.ContainerMetadata{Name: l[LabelName], Attempt: parseAttempt(l[LabelAttempt])}
}

// ListContainers lists our containers with the CRI filter.
func (b *Backend) ListContainers(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	items, err := b.listContainers(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListContainersResponse{Containers: items}, nil
}

func (b *Backend) listContainers(ctx context.Context, f *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	var extra []string
	if f.GetPodSandboxId() != "" && len(f.GetPodSandboxId()) == 64 {
		extra = append(extra, LabelSandboxID+"="+f.PodSandboxId)
	}
	cs, err := b.listDocker(ctx, typeContainer, extra...)
	if err != nil {
		return nil, toStatus(err, "list containers")
	}
	out := make([]*runtimeapi.Container, 0, len(cs))
	for _, c := range cs {
		l := c.Labels
		ct := &runtimeapi.Container{
			Id: c.ID, PodSandboxId: l[LabelSandboxID], Metadata: containerMeta(l),
			Image: &runtimeapi.ImageSpec{Image: l[LabelImage], UserSpecifiedImage: l[LabelImage]}, ImageRef: c.ImageID, ImageId: c.ImageID,
			State: containerState(c.State), Labels: decodeMap(l[LabelCRILabels]), Annotations: decodeMap(l[LabelAnnotations]),
		}
		ct.CreatedAt, _ = strconv.ParseInt(l[labelCreated], 10, 64)
		if f != nil {
			if f.Id != "" && !strings.HasPrefix(ct.Id, f.Id) {
				continue
			}
			if f.PodSandboxId != "" && !strings.HasPrefix(ct.PodSandboxId, f.PodSandboxId) {
				continue
			}
			if f.State != nil && f.State.State != ct.State {
				continue
			}
			if !matchLabels(f.LabelSelector, ct.Labels) {
				continue
			}
		}
		out = append(out, ct)
	}
	return out, nil
}

func parseDockerTime(s string) int64 {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() < 2 {
		return 0
	}
	return t.UnixNano()
}

// ContainerStatus reports state, exit code, reason and times of a container.
func (b *Backend) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	ct, err := b.inspectContainer(ctx, req.ContainerId)
	if err != nil {
		return nil, err
	}
	st := b.containerStatus(ct)
	st.User = b.containerUser(ct)
	if st.State == runtimeapi.ContainerState_CONTAINER_EXITED {
		// Let the log follower drain so callers reading the log after
		// seeing EXITED find every line.
		b.waitFollower(ct.ID, 2*time.Second)
	}
	resp := &runtimeapi.ContainerStatusResponse{Status: st}
	if req.Verbose {
		pid := 0
		if ct.State != nil {
			pid = ct.State.Pid
		}
		resp.Info = map[string]string{"info": fmt.Sprintf(`{"pid":%d}`, pid)}
	}
	return resp, nil
}

func (b *Backend) containerStatus(ct container.InspectResponse) *runtimeapi.ContainerStatus {
	l := ct.Config.Labels
	st := &runtimeapi.ContainerStatus{
		Id: ct.ID, Metadata: containerMeta(l),
		Image:    &runtimeapi.ImageSpec{Image: l[LabelImage], UserSpecifiedImage: l[LabelImage]},
		ImageRef: ct.Image, ImageId: ct.Image,
		Labels: decodeMap(l[LabelCRILabels]), Annotations: decodeMap(l[LabelAnnotations]),
		LogPath: l[LabelLogPath],
	}
	st.CreatedAt, _ = strconv.ParseInt(l[labelCreated], 10, 64)
	if s := ct.State; s != nil {
		st.State = containerState(s.Status)
		if st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
			st.StartedAt = parseDockerTime(s.StartedAt)
		}
		if st.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			st.FinishedAt = parseDockerTime(s.FinishedAt)
			st.ExitCode = int32(s.ExitCode)
			switch {
			case s.OOMKilled:
				st.Reason = "OOMKilled"
			case s.ExitCode == 0:
				st.Reason = "Completed"
			default:
				st.Reason = "Error"
			}
			st.Message = s.Error
		}
	}
	images := decodeImageMounts(l[LabelImageMounts])
	for _, m := range ct.Mounts {
		if m.Type != "bind" || isSharedResolvConf(m.Destination, m.Source, ct.Config.Labels[LabelSandboxID]) {
			continue
		}
		if im, ok := images[m.Destination]; ok {
			// An image volume, as it was asked for (no host path).
			st.Mounts = append(st.Mounts, &runtimeapi.Mount{ContainerPath: m.Destination, Readonly: true,
				Image: &runtimeapi.ImageSpec{Image: im.Image}, ImageSubPath: im.SubPath})
			continue
		}
		cm := &runtimeapi.Mount{ContainerPath: m.Destination, HostPath: m.Source, Readonly: !m.RW}
		switch m.Propagation {
		case "rslave", "slave":
			cm.Propagation = runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
		case "rshared", "shared":
			cm.Propagation = runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
		}
		st.Mounts = append(st.Mounts, cm)
	}
	if hc := ct.HostConfig; hc != nil {
		st.Resources = &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{
			CpuPeriod: hc.CPUPeriod, CpuQuota: hc.CPUQuota, CpuShares: hc.CPUShares,
			MemoryLimitInBytes: hc.Memory, OomScoreAdj: int64(hc.OomScoreAdj),
			CpusetCpus: hc.CpusetCpus, CpusetMems: hc.CpusetMems,
		}}
	}
	return st
}

// UpdateContainerResources changes the CPU shares, CFS quota and period,
// memory limit and cpusets of a container, as an in-place resize asks. The
// request carries the container's whole desired configuration: a zero quota
// (no CPU limit) clears a quota set before, and the memory-swap limit follows
// the memory limit (no swap, as at creation) so a raised limit is not refused
// for exceeding the old swap limit. A zero memory limit leaves the current one
// (Docker cannot lift a memory limit in place). Values the kernel or Docker
// would refuse are InvalidArgument naming the field.
func (b *Backend) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	if req.ContainerId == "" {
		return nil, status.Error(codes.InvalidArgument, "container_id is required")
	}
	if err := validateResources(req.Linux); err != nil {
		return nil, err
	}
	ct, err := b.inspectContainer(ctx, req.ContainerId)
	if err != nil {
		return nil, err
	}
	if req.Linux == nil {
		return &runtimeapi.UpdateContainerResourcesResponse{}, nil
	}
	var r container.Resources
	applyResources(&r, req.Linux)
	if r.CPUQuota == 0 && ct.HostConfig != nil && ct.HostConfig.CPUQuota > 0 {
		r.CPUQuota = -1 // Docker reads 0 as "unchanged"; -1 lifts the quota
	}
	if _, err := b.cli.ContainerUpdate(ctx, ct.ID, client.ContainerUpdateOptions{Resources: &r}); err != nil {
		return nil, toStatus(err, "update container %s", ct.ID)
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

// Bounds the kernel (and Docker) put on the CFS and memory settings.
const (
	minCPUShares   = 2
	minCFSPeriod   = 1000    // 1 ms, in microseconds
	maxCFSPeriod   = 1000000 // 1 s
	minCFSQuota    = 1000
	minMemoryLimit = 6 * 1024 * 1024 // Docker's minimum
	resourcesField = "linux.resources."
)

// validateResources checks the settings the shim passes to Docker; nil is
// valid (nothing to change).
func validateResources(r *runtimeapi.LinuxContainerResources) error {
	if r == nil {
		return nil
	}
	bad := func(field string, v any, why string) error {
		return status.Errorf(codes.InvalidArgument, "%s%s %v: %s", resourcesField, field, v, why)
	}
	switch {
	case r.CpuShares < 0 || (r.CpuShares > 0 && r.CpuShares < minCPUShares):
		return bad("cpu_shares", r.CpuShares, "must be 0 (default) or at least 2")
	case r.CpuPeriod != 0 && (r.CpuPeriod < minCFSPeriod || r.CpuPeriod > maxCFSPeriod):
		return bad("cpu_period", r.CpuPeriod, "must be 0 (default) or 1000..1000000 microseconds")
	case r.CpuQuota < -1 || (r.CpuQuota > 0 && r.CpuQuota < minCFSQuota):
		return bad("cpu_quota", r.CpuQuota, "must be -1 or 0 (no limit) or at least 1000 microseconds")
	case r.MemoryLimitInBytes < 0 || (r.MemoryLimitInBytes > 0 && r.MemoryLimitInBytes < minMemoryLimit):
		return bad("memory_limit_in_bytes", r.MemoryLimitInBytes, "must be 0 (no limit) or at least 6 MiB")
	case r.MemorySwapLimitInBytes > 0 && r.MemorySwapLimitInBytes < r.MemoryLimitInBytes:
		return bad("memory_swap_limit_in_bytes", r.MemorySwapLimitInBytes, "must not be below memory_limit_in_bytes")
	}
	if r.CpusetCpus != "" {
		if _, err := cpuset.Parse(r.CpusetCpus); err != nil {
			return bad("cpuset_cpus", strconv.Quote(r.CpusetCpus), err.Error())
		}
	}
	if r.CpusetMems != "" {
		if _, err := cpuset.Parse(r.CpusetMems); err != nil {
			return bad("cpuset_mems", strconv.Quote(r.CpusetMems), err.Error())
		}
	}
	return nil
}

// ReopenContainerLog reopens the CRI log file after the caller rotated it.
func (b *Backend) ReopenContainerLog(ctx context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	ct, err := b.inspectContainer(ctx, req.ContainerId)
	if err != nil {
		return nil, err
	}
	if ct.State == nil || !ct.State.Running {
		return nil, status.Errorf(codes.FailedPrecondition, "container %s is not running", ct.ID)
	}
	b.mu.Lock()
	f := b.logs[ct.ID]
	b.mu.Unlock()
	if f == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "container %s has no log file", ct.ID)
	}
	if err := f.copier.Reopen(); err != nil {
		return nil, status.Errorf(codes.Internal, "reopen log of %s: %v", ct.ID, err)
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}
