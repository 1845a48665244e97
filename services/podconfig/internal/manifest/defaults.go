package manifest

import (
	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
)

// The functions in this file give a decoded v1 Pod the same API defaults the
// API machinery's defaulting functions would (k8s.io/kubernetes/pkg/apis/core/v1,
// which this module must not import). They matter twice: consumers see the same
// fields the kubelet would, and the UID hash covers the defaulted pod, so a
// missing default changes the UID.
//
// Not covered: ephemeral containers (a static pod cannot have them) and the
// pod-level resources defaults (spec.resources); see docs/podconfig.md.

func setPodDefaults(pod *corev1.Pod) {
	spec := &pod.Spec
	// Requests default to limits for every container of a Pod.
	for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for i := range cs {
			res := &cs[i].Resources
			if res.Limits == nil {
				continue
			}
			if res.Requests == nil {
				res.Requests = corev1.ResourceList{}
			}
			for k, v := range res.Limits {
				if _, ok := res.Requests[k]; !ok {
					res.Requests[k] = v.DeepCopy()
				}
			}
		}
	}
	if spec.EnableServiceLinks == nil {
		v := corev1.DefaultEnableServiceLinks
		spec.EnableServiceLinks = &v
	}
	if spec.HostNetwork {
		for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
			for i := range cs {
				for j := range cs[i].Ports {
					if cs[i].Ports[j].HostPort == 0 {
						cs[i].Ports[j].HostPort = cs[i].Ports[j].ContainerPort
					}
				}
			}
		}
	}

	if spec.DNSPolicy == "" {
		spec.DNSPolicy = corev1.DNSClusterFirst
	}
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if spec.TerminationGracePeriodSeconds == nil {
		v := int64(corev1.DefaultTerminationGracePeriodSeconds)
		spec.TerminationGracePeriodSeconds = &v
	}
	if spec.SchedulerName == "" {
		spec.SchedulerName = corev1.DefaultSchedulerName
	}

	for i := range spec.Volumes {
		setVolumeDefaults(&spec.Volumes[i])
	}
	for i := range spec.InitContainers {
		setContainerDefaults(&spec.InitContainers[i])
	}
	for i := range spec.Containers {
		setContainerDefaults(&spec.Containers[i])
	}
	roundResourceList(spec.Overhead)
	if spec.Resources != nil {
		roundResourceList(spec.Resources.Limits)
		roundResourceList(spec.Resources.Requests)
	}
	st := &pod.Status
	for _, ss := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
		for i := range ss {
			roundResourceList(ss[i].AllocatedResources)
			if ss[i].Resources != nil {
				roundResourceList(ss[i].Resources.Limits)
				roundResourceList(ss[i].Resources.Requests)
			}
		}
	}
	roundResourceList(st.AllocatedResources)
	if st.Resources != nil {
		roundResourceList(st.Resources.Limits)
		roundResourceList(st.Resources.Requests)
	}
}

// roundResourceList rounds every quantity up to milli precision, as the API does.
func roundResourceList(rl corev1.ResourceList) {
	for k, v := range rl {
		v.RoundUp(-3)
		rl[k] = v
	}
}

// pullPolicyFor is the API's default pull policy: Always for :latest (or no
// tag at all), IfNotPresent otherwise, including for images it cannot parse.
func pullPolicyFor(image string) corev1.PullPolicy {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return corev1.PullIfNotPresent
	}
	named = reference.TagNameOnly(named)
	if t, ok := named.(reference.Tagged); ok && t.Tag() == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

func setVolumeDefaults(v *corev1.Volume) {
	vs := &v.VolumeSource
	if allVolumeSourcesNil(vs) {
		*vs = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	}
	if vs.Image != nil && vs.Image.PullPolicy == "" {
		vs.Image.PullPolicy = pullPolicyFor(vs.Image.Reference)
	}
	if vs.HostPath != nil && vs.HostPath.Type == nil {
		t := corev1.HostPathUnset
		vs.HostPath.Type = &t
	}
	if vs.Secret != nil && vs.Secret.DefaultMode == nil {
		m := corev1.SecretVolumeSourceDefaultMode
		vs.Secret.DefaultMode = &m
	}
	if vs.ISCSI != nil && vs.ISCSI.ISCSIInterface == "" {
		vs.ISCSI.ISCSIInterface = "default"
	}
	if vs.RBD != nil {
		if vs.RBD.RBDPool == "" {
			vs.RBD.RBDPool = "rbd"
		}
		if vs.RBD.RadosUser == "" {
			vs.RBD.RadosUser = "admin"
		}
		if vs.RBD.Keyring == "" {
			vs.RBD.Keyring = "/etc/ceph/keyring"
		}
	}
	if vs.DownwardAPI != nil {
		if vs.DownwardAPI.DefaultMode == nil {
			m := corev1.DownwardAPIVolumeSourceDefaultMode
			vs.DownwardAPI.DefaultMode = &m
		}
		setDownwardItemsDefaults(vs.DownwardAPI.Items)
	}
	if vs.ConfigMap != nil && vs.ConfigMap.DefaultMode == nil {
		m := corev1.ConfigMapVolumeSourceDefaultMode
		vs.ConfigMap.DefaultMode = &m
	}
	if d := vs.AzureDisk; d != nil {
		if d.CachingMode == nil {
			m := corev1.AzureDataDiskCachingReadWrite
			d.CachingMode = &m
		}
		if d.FSType == nil {
			s := "ext4"
			d.FSType = &s
		}
		if d.ReadOnly == nil {
			b := false
			d.ReadOnly = &b
		}
		if d.Kind == nil {
			k := corev1.AzureSharedBlobDisk
			d.Kind = &k
		}
	}
	if p := vs.Projected; p != nil {
		if p.DefaultMode == nil {
			m := corev1.ProjectedVolumeSourceDefaultMode
			p.DefaultMode = &m
		}
		for j := range p.Sources {
			s := &p.Sources[j]
			if s.DownwardAPI != nil {
				setDownwardItemsDefaults(s.DownwardAPI.Items)
			}
			if s.ServiceAccountToken != nil && s.ServiceAccountToken.ExpirationSeconds == nil {
				h := int64(3600)
				s.ServiceAccountToken.ExpirationSeconds = &h
			}
		}
	}
	if s := vs.ScaleIO; s != nil {
		if s.StorageMode == "" {
			s.StorageMode = "ThinProvisioned"
		}
		if s.FSType == "" {
			s.FSType = "xfs"
		}
	}
	if e := vs.Ephemeral; e != nil && e.VolumeClaimTemplate != nil {
		spec := &e.VolumeClaimTemplate.Spec
		if spec.VolumeMode == nil {
			m := corev1.PersistentVolumeFilesystem
			spec.VolumeMode = &m
		}
		roundResourceList(spec.Resources.Limits)
		roundResourceList(spec.Resources.Requests)
	}
}

func setDownwardItemsDefaults(items []corev1.DownwardAPIVolumeFile) {
	for k := range items {
		if items[k].FieldRef != nil && items[k].FieldRef.APIVersion == "" {
			items[k].FieldRef.APIVersion = "v1"
		}
	}
}

func allVolumeSourcesNil(vs *corev1.VolumeSource) bool {
	return *vs == corev1.VolumeSource{}
}

func setContainerDefaults(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = pullPolicyFor(c.Image)
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for j := range c.Ports {
		if c.Ports[j].Protocol == "" {
			c.Ports[j].Protocol = corev1.ProtocolTCP
		}
	}
	for j := range c.Env {
		vf := c.Env[j].ValueFrom
		if vf == nil {
			continue
		}
		if vf.FieldRef != nil && vf.FieldRef.APIVersion == "" {
			vf.FieldRef.APIVersion = "v1"
		}
		if vf.FileKeyRef != nil && vf.FileKeyRef.Optional == nil {
			b := false
			vf.FileKeyRef.Optional = &b
		}
	}
	roundResourceList(c.Resources.Limits)
	roundResourceList(c.Resources.Requests)
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p == nil {
			continue
		}
		if p.TimeoutSeconds == 0 {
			p.TimeoutSeconds = 1
		}
		if p.PeriodSeconds == 0 {
			p.PeriodSeconds = 10
		}
		if p.SuccessThreshold == 0 {
			p.SuccessThreshold = 1
		}
		if p.FailureThreshold == 0 {
			p.FailureThreshold = 3
		}
		setHTTPGetDefaults(p.HTTPGet)
		if p.GRPC != nil && p.GRPC.Service == nil {
			s := ""
			p.GRPC.Service = &s
		}
	}
	if c.Lifecycle != nil {
		if c.Lifecycle.PostStart != nil {
			setHTTPGetDefaults(c.Lifecycle.PostStart.HTTPGet)
		}
		if c.Lifecycle.PreStop != nil {
			setHTTPGetDefaults(c.Lifecycle.PreStop.HTTPGet)
		}
	}
}

func setHTTPGetDefaults(h *corev1.HTTPGetAction) {
	if h == nil {
		return
	}
	if h.Path == "" {
		h.Path = "/"
	}
	if h.Scheme == "" {
		h.Scheme = corev1.URISchemeHTTP
	}
}
