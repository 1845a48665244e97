package podruntime

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/podutil"
	"github.com/microlet/microlet/services/podsyncd/internal/containerlogs"
	"github.com/microlet/microlet/services/podsyncd/internal/dns"
	"github.com/microlet/microlet/services/podsyncd/internal/envvars"
	"github.com/microlet/microlet/services/podsyncd/internal/events"
	"github.com/microlet/microlet/services/podsyncd/internal/resources"
	"github.com/microlet/microlet/services/podsyncd/internal/securitycontext"
)

// backoffKey is stable across restarts of the same container spec.
func backoffKey(pod *corev1.Pod, c *corev1.Container) string {
	return string(pod.UID) + "_" + c.Name + "_" + HashContainer(c)
}

func (m *Manager) startOne(ctx context.Context, pod *corev1.Pod, c *corev1.Container, kind containerKind, st *PodStatus, sandboxID string, sbConfig *runtimeapi.PodSandboxConfig, res *SyncResult) {
	prev := st.Latest(c.Name)
	restarts := 0
	if prev != nil {
		restarts = prev.Attempt + 1
		if prev.State == StateExited {
			key := backoffKey(pod, c)
			if wait, left, in := m.crash.wait(pod.UID, key, prev.ID, prev.FinishedAt); in {
				msg := fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", wait, c.Name, pod.Name, pod.Namespace, pod.UID)
				m.opts.Recorder.Eventf(events.ContainerRef(pod, c), corev1.EventTypeWarning, events.BackOff,
					"Back-off restarting failed container %s in pod %s_%s(%s)", c.Name, pod.Name, pod.Namespace, pod.UID)
				m.setReason(pod.UID, c.Name, &Reason{ReasonCrashLoopBackOff, msg})
				res.requeue(left + 100*time.Millisecond)
				return
			}
			m.crash.next(pod.UID, key, prev.ID, prev.FinishedAt)
		}
		if prev.State == StateCreated {
			restarts = prev.Attempt
			// Remove the never-started instance before creating the next one.
			_ = m.rt.RemoveContainer(ctx, prev.ID)
		}
	}
	// Past the back-off, an attempt counts as a start; a failure counts
	// with its error code, the reason the container waits with.
	label := kind.metricLabel()
	m.opts.Metrics.ContainerStarting(label)
	code := ""
	defer func() {
		if code != "" {
			m.opts.Metrics.ContainerFailed(label, code)
		}
	}()
	// pullFailed ends a start whose image (or image volume) pull failed:
	// the failure is counted under the waiting reason the pull left.
	pullFailed := func(err error) {
		code = ReasonErrImagePull
		if r, ok := m.Reasons(pod.UID)[c.Name]; ok {
			code = r.Reason
			m.containerEvent(pod, c, "", corev1.EventTypeWarning, events.Failed, "Error: "+r.Reason)
		}
		res.fail(err)
	}
	imageRef, err := m.ensureImage(ctx, pod, c)
	if err != nil {
		pullFailed(err)
		return
	}
	imageVols, err := m.imageVolumes(ctx, pod, c)
	if err != nil {
		pullFailed(err)
		return
	}
	target, err := pidTarget(pod, c, kind, st)
	if err != nil {
		code = ReasonCreateConfigError
		m.containerEvent(pod, c, "", corev1.EventTypeWarning, events.Failed, "Error: "+err.Error())
		m.setReason(pod.UID, c.Name, &Reason{ReasonCreateConfigError, err.Error()})
		res.fail(err)
		return
	}
	cfg, err := m.containerConfig(ctx, pod, c, kind, restarts, imageRef, sandboxID, target, imageVols)
	if err != nil {
		code = ReasonCreateConfigError
		m.containerEvent(pod, c, "", corev1.EventTypeWarning, events.Failed, "Error: "+err.Error())
		m.setReason(pod.UID, c.Name, &Reason{ReasonCreateConfigError, err.Error()})
		res.fail(err)
		return
	}
	createdID, err := m.rt.CreateContainer(ctx, sandboxID, cfg, sbConfig)
	if err != nil {
		code = ReasonCreateContainerError
		m.containerEvent(pod, c, "", corev1.EventTypeWarning, events.Failed, "Error: "+grpcMessage(err))
		m.setReason(pod.UID, c.Name, &Reason{ReasonCreateContainerError, err.Error()})
		res.fail(fmt.Errorf("create container %s: %w", c.Name, err))
		return
	}
	m.containerEvent(pod, c, createdID, corev1.EventTypeNormal, events.Created, "Container created")
	m.recordActuated(pod, c, kind)
	if err := m.rt.StartContainer(ctx, createdID); err != nil {
		code = ReasonRunContainerError
		m.containerEvent(pod, c, createdID, corev1.EventTypeWarning, events.Failed, "Error: "+grpcMessage(err))
		m.setReason(pod.UID, c.Name, &Reason{ReasonRunContainerError, err.Error()})
		res.fail(fmt.Errorf("start container %s: %w", c.Name, err))
		return
	}
	m.setReason(pod.UID, c.Name, nil)
	if kind == kindInit && !podutil.IsSidecar(c) {
		m.opts.Startup.InitContainerStarted(pod.UID, m.opts.Clock.Now())
	}
	m.containerEvent(pod, c, createdID, corev1.EventTypeNormal, events.Started, "Container started")
	if err := containerlogs.Link(m.opts.LogSymlinkDir, pod.Name, pod.Namespace, c.Name, createdID,
		filepath.Join(sbConfig.GetLogDirectory(), cfg.GetLogPath())); err != nil {
		m.log.Warn("container log symlink", "pod", podRef(pod), "container", c.Name, "err", err)
	}
	m.log.Info("started container", "pod", podRef(pod), "container", c.Name, "id", createdID, "restarts", restarts)
	if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
		if msg, err := m.runHandler(ctx, pod, c, createdID, c.Lifecycle.PostStart, 0); err != nil {
			m.log.Warn("postStart hook failed; killing container", "pod", podRef(pod), "container", c.Name, "err", err)
			m.containerEvent(pod, c, createdID, corev1.EventTypeWarning, events.FailedPostStartHook, "PostStartHook failed")
			m.setReason(pod.UID, c.Name, &Reason{ReasonPostStartHookError, msg})
			code = ReasonPostStartHookError
			_ = m.killContainer(ctx, pod, createdID, c.Name, "FailedPostStartHook", nil)
			res.fail(fmt.Errorf("postStart hook of %s: %w", c.Name, err))
		}
	}
}

// pidTarget is the runtime ID of the container whose process namespace an
// ephemeral container with targetContainerName shares: the target's newest
// instance, as upstream takes it; the runtime refuses one that is not
// running. "" when there is no target.
func pidTarget(pod *corev1.Pod, c *corev1.Container, kind containerKind, st *PodStatus) (string, error) {
	if kind != kindEphemeral {
		return "", nil
	}
	for i := range pod.Spec.EphemeralContainers {
		ec := &pod.Spec.EphemeralContainers[i]
		if ec.Name != c.Name || ec.TargetContainerName == "" {
			continue
		}
		t := st.Latest(ec.TargetContainerName)
		if t == nil {
			return "", fmt.Errorf("unable to find target container %s", ec.TargetContainerName)
		}
		return t.ID, nil
	}
	return "", nil
}

// killContainer runs the preStop hook (bounded by the grace period), then
// stops the container with what is left of it.
func (m *Manager) killContainer(ctx context.Context, pod *corev1.Pod, id, name, message string, grace *int64) error {
	g := gracePeriod(pod, grace)
	start := m.opts.Clock.Now()
	c := podutil.FindContainer(pod, name, true)
	if c != nil {
		if message == "" {
			message = "Stopping container " + c.Name
		}
		m.containerEvent(pod, c, id, corev1.EventTypeNormal, events.Killing, message)
	}
	if c != nil && c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		hctx, cancel := context.WithTimeout(ctx, time.Duration(g)*time.Second)
		if _, err := m.runHandler(hctx, pod, c, id, c.Lifecycle.PreStop, time.Duration(g)*time.Second); err != nil {
			m.log.Warn("preStop hook failed", "pod", podRef(pod), "container", name, "err", err)
			m.containerEvent(pod, c, id, corev1.EventTypeWarning, events.FailedPreStopHook, "PreStopHook failed")
		}
		cancel()
		g -= int64(m.opts.Clock.Since(start).Seconds())
		if g < minGracePeriod {
			g = minGracePeriod
		}
	}
	if err := m.rt.StopContainer(ctx, id, g); err != nil {
		return fmt.Errorf("stop container %s (%s): %w", name, id, err)
	}
	return nil
}

// gracePeriod is the pod's termination grace: the deletion grace period when
// set, else the spec's, else 30 s; never below the kubelet's 2 s minimum.
func gracePeriod(pod *corev1.Pod, override *int64) int64 {
	g := int64(corev1.DefaultTerminationGracePeriodSeconds)
	switch {
	case override != nil:
		g = *override
	case pod != nil && pod.DeletionGracePeriodSeconds != nil:
		g = *pod.DeletionGracePeriodSeconds
	case pod != nil && pod.Spec.TerminationGracePeriodSeconds != nil:
		g = *pod.Spec.TerminationGracePeriodSeconds
	}
	if g < minGracePeriod {
		g = minGracePeriod
	}
	return g
}

func nameOf(st *PodStatus, id string) string {
	for _, c := range st.Containers {
		if c.ID == id {
			return c.Name
		}
	}
	return ""
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
	rroSupported := m.SupportsRecursiveReadOnlyMounts(pod)
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
		// As the kubelet, on the volumeMount as written (a volume forced
		// read-only does not make recursiveReadOnly valid).
		rro, err := ResolveRecursiveReadOnly(&vm, rroSupported)
		if err != nil {
			return nil, fmt.Errorf("failed to resolve recursive read-only mode: %w", err)
		}
		if v.Image {
			// The runtime mounts the image (its subPath directory) read-only.
			img, ok := images[vm.Name]
			if !ok {
				return nil, fmt.Errorf("container %s: image volume %q is not pulled", c.Name, vm.Name)
			}
			out = append(out, &runtimeapi.Mount{ContainerPath: vm.MountPath, Image: img, ImageSubPath: sub, Readonly: true, RecursiveReadOnly: rro})
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
		mnt := &runtimeapi.Mount{ContainerPath: vm.MountPath, HostPath: host, Readonly: vm.ReadOnly || v.ReadOnly, RecursiveReadOnly: rro}
		if vm.MountPropagation != nil {
			switch *vm.MountPropagation {
			case corev1.MountPropagationHostToContainer:
				mnt.Propagation = runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
			case corev1.MountPropagationBidirectional:
				mnt.Propagation = runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
			case corev1.MountPropagationNone:
			default:
				return nil, fmt.Errorf("invalid MountPropagation mode: %q", *vm.MountPropagation)
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
	if v := m.opts.Volumes; v != nil {
		info.VolumePaths = map[string]string{}
		for name, vol := range v.Paths(pod.UID) {
			if !vol.Image {
				info.VolumePaths[name] = vol.Path
			}
		}
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

// imageUser is the user the image runs as (the kubelet's getImageUser):
// it fills an unset runAsUser and decides runAsNonRoot.
func (m *Manager) imageUser(ctx context.Context, image string) (securitycontext.ImageUser, error) {
	resp, err := m.img.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: image}, false)
	if err != nil {
		return securitycontext.ImageUser{}, fmt.Errorf("cannot read the user of image %s: %w", image, err)
	}
	return securitycontext.FromImage(resp.Image), nil
}
