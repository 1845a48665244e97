package manifest

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/microlet/microlet/internal/podutil"
)

// validate checks the parts of upstream's ValidatePodCreate that a static pod
// can get wrong and that the rest of microlet relies on: object metadata,
// container and volume names, images, ports, policies and probes. Every error
// names the field. It is a subset: deep checks of security contexts, affinity
// and topology constraints are left to the runtime.
func validate(pod *corev1.Pod) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, apimachineryvalidation.ValidateObjectMeta(&pod.ObjectMeta, true,
		apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)

	spec := &pod.Spec
	sp := field.NewPath("spec")
	vols := sets.New[string]()
	for i, v := range spec.Volumes {
		p := sp.Child("volumes").Index(i)
		for _, msg := range validation.IsDNS1123Label(v.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), v.Name, msg))
		}
		if vols.Has(v.Name) {
			errs = append(errs, field.Duplicate(p.Child("name"), v.Name))
		}
		vols.Insert(v.Name)
		if n := countVolumeSources(&v.VolumeSource); n > 1 {
			errs = append(errs, field.Forbidden(p, "may not specify more than 1 volume type"))
		}
		if v.HostPath != nil && v.HostPath.Path == "" {
			errs = append(errs, field.Required(p.Child("hostPath", "path"), ""))
		}
	}

	if len(spec.Containers) == 0 {
		errs = append(errs, field.Required(sp.Child("containers"), "a pod needs at least one container"))
	}
	names := sets.New[string]()
	checkContainers := func(cs []corev1.Container, p *field.Path, init bool) {
		for i := range cs {
			errs = append(errs, validateContainer(&cs[i], p.Index(i), names, vols, init)...)
		}
	}
	checkContainers(spec.InitContainers, sp.Child("initContainers"), true)
	checkContainers(spec.Containers, sp.Child("containers"), false)
	if len(spec.EphemeralContainers) > 0 {
		errs = append(errs, field.Forbidden(sp.Child("ephemeralContainers"), "cannot be set on create"))
	}

	switch spec.RestartPolicy {
	case corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	default:
		errs = append(errs, field.NotSupported(sp.Child("restartPolicy"), spec.RestartPolicy,
			[]corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}))
	}
	switch spec.DNSPolicy {
	case corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone:
	default:
		errs = append(errs, field.NotSupported(sp.Child("dnsPolicy"), spec.DNSPolicy,
			[]corev1.DNSPolicy{corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone}))
	}
	if spec.DNSPolicy == corev1.DNSNone && (spec.DNSConfig == nil || len(spec.DNSConfig.Nameservers) == 0) {
		errs = append(errs, field.Required(sp.Child("dnsConfig", "nameservers"), "must provide at least one DNS nameserver when dnsPolicy is None"))
	}
	if spec.ActiveDeadlineSeconds != nil && *spec.ActiveDeadlineSeconds <= 0 {
		errs = append(errs, field.Invalid(sp.Child("activeDeadlineSeconds"), *spec.ActiveDeadlineSeconds, "must be greater than 0"))
	}
	if spec.NodeName != "" {
		for _, msg := range validation.IsDNS1123Subdomain(spec.NodeName) {
			errs = append(errs, field.Invalid(sp.Child("nodeName"), spec.NodeName, msg))
		}
	}
	errs = append(errs, metav1validation.ValidateLabels(spec.NodeSelector, sp.Child("nodeSelector"))...)
	if spec.Hostname != "" {
		for _, msg := range validation.IsDNS1123Label(spec.Hostname) {
			errs = append(errs, field.Invalid(sp.Child("hostname"), spec.Hostname, msg))
		}
	}
	if spec.Subdomain != "" {
		for _, msg := range validation.IsDNS1123Label(spec.Subdomain) {
			errs = append(errs, field.Invalid(sp.Child("subdomain"), spec.Subdomain, msg))
		}
	}
	for i, t := range spec.Tolerations {
		p := sp.Child("tolerations").Index(i)
		if t.Operator == corev1.TolerationOpExists && t.Value != "" {
			errs = append(errs, field.Invalid(p.Child("operator"), t.Operator, "value must be empty when `operator` is 'Exists'"))
		}
		if t.Key == "" && t.Operator != corev1.TolerationOpExists {
			errs = append(errs, field.Invalid(p.Child("operator"), t.Operator, "operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
		}
		switch t.Effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect,
				[]corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}))
		}
	}
	return errs
}

func validateContainer(c *corev1.Container, p *field.Path, names, vols sets.Set[string], init bool) field.ErrorList {
	var errs field.ErrorList
	if c.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	} else {
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), c.Name, msg))
		}
		if names.Has(c.Name) {
			errs = append(errs, field.Duplicate(p.Child("name"), c.Name))
		}
		names.Insert(c.Name)
	}
	if strings.TrimSpace(c.Image) == "" {
		errs = append(errs, field.Required(p.Child("image"), "an image is needed"))
	} else if c.Image != strings.TrimSpace(c.Image) {
		errs = append(errs, field.Invalid(p.Child("image"), c.Image, "must not have leading or trailing whitespace"))
	}
	switch c.ImagePullPolicy {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		errs = append(errs, field.NotSupported(p.Child("imagePullPolicy"), c.ImagePullPolicy,
			[]corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}))
	}
	switch c.TerminationMessagePolicy {
	case corev1.TerminationMessageReadFile, corev1.TerminationMessageFallbackToLogsOnError:
	default:
		errs = append(errs, field.NotSupported(p.Child("terminationMessagePolicy"), c.TerminationMessagePolicy,
			[]corev1.TerminationMessagePolicy{corev1.TerminationMessageReadFile, corev1.TerminationMessageFallbackToLogsOnError}))
	}
	portNames := sets.New[string]()
	for i, port := range c.Ports {
		pp := p.Child("ports").Index(i)
		if port.Name != "" {
			for _, msg := range validation.IsValidPortName(port.Name) {
				errs = append(errs, field.Invalid(pp.Child("name"), port.Name, msg))
			}
			if portNames.Has(port.Name) {
				errs = append(errs, field.Duplicate(pp.Child("name"), port.Name))
			}
			portNames.Insert(port.Name)
		}
		for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
			errs = append(errs, field.Invalid(pp.Child("containerPort"), port.ContainerPort, msg))
		}
		if port.HostPort != 0 {
			for _, msg := range validation.IsValidPortNum(int(port.HostPort)) {
				errs = append(errs, field.Invalid(pp.Child("hostPort"), port.HostPort, msg))
			}
		}
		switch port.Protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol,
				[]corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}))
		}
	}
	for i, e := range c.Env {
		ep := p.Child("env").Index(i)
		if e.Name == "" {
			errs = append(errs, field.Required(ep.Child("name"), ""))
		}
		if e.Value != "" && e.ValueFrom != nil {
			errs = append(errs, field.Invalid(ep.Child("valueFrom"), "", "may not be specified when `value` is not empty"))
		}
	}
	mounts := sets.New[string]()
	for i, m := range c.VolumeMounts {
		mp := p.Child("volumeMounts").Index(i)
		if !vols.Has(m.Name) {
			errs = append(errs, field.NotFound(mp.Child("name"), m.Name))
		}
		if m.MountPath == "" {
			errs = append(errs, field.Required(mp.Child("mountPath"), ""))
		} else if mounts.Has(m.MountPath) {
			errs = append(errs, field.Invalid(mp.Child("mountPath"), m.MountPath, "must be unique"))
		}
		mounts.Insert(m.MountPath)
	}
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
	}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}} {
		if pr.probe == nil {
			continue
		}
		pp := p.Child(pr.name)
		if init && !podutil.IsSidecar(c) {
			errs = append(errs, field.Forbidden(pp, "may not be set for init containers without restartPolicy=Always"))
			continue
		}
		n := 0
		h := pr.probe.ProbeHandler
		for _, set := range []bool{h.Exec != nil, h.HTTPGet != nil, h.TCPSocket != nil, h.GRPC != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			errs = append(errs, field.Required(pp, "must specify exactly one handler type (exec, httpGet, tcpSocket or grpc)"))
		}
		if (pr.name == "livenessProbe" || pr.name == "startupProbe") && pr.probe.SuccessThreshold != 1 {
			errs = append(errs, field.Invalid(pp.Child("successThreshold"), pr.probe.SuccessThreshold, "must be 1"))
		}
	}
	return errs
}

func countVolumeSources(vs *corev1.VolumeSource) int {
	n := 0
	for _, set := range []bool{
		vs.HostPath != nil, vs.EmptyDir != nil, vs.GCEPersistentDisk != nil, vs.AWSElasticBlockStore != nil,
		vs.GitRepo != nil, vs.Secret != nil, vs.NFS != nil, vs.ISCSI != nil, vs.Glusterfs != nil,
		vs.PersistentVolumeClaim != nil, vs.RBD != nil, vs.FlexVolume != nil, vs.Cinder != nil, vs.CephFS != nil,
		vs.Flocker != nil, vs.DownwardAPI != nil, vs.FC != nil, vs.AzureFile != nil, vs.ConfigMap != nil,
		vs.VsphereVolume != nil, vs.Quobyte != nil, vs.AzureDisk != nil, vs.PhotonPersistentDisk != nil,
		vs.Projected != nil, vs.PortworxVolume != nil, vs.ScaleIO != nil, vs.StorageOS != nil, vs.CSI != nil,
		vs.Ephemeral != nil, vs.Image != nil,
	} {
		if set {
			n++
		}
	}
	return n
}

// apiReference reports the first API object a static pod refers to; the
// kubelet refuses those because a static pod must not reach objects the node
// may not read (upstream's PreventStaticPodAPIReferences, on by default).
func apiReference(pod *corev1.Pod) string {
	spec := &pod.Spec
	if spec.ServiceAccountName != "" || spec.DeprecatedServiceAccount != "" {
		return "serviceaccounts"
	}
	if len(spec.ImagePullSecrets) > 0 {
		return "secrets"
	}
	var secret, configMap bool
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			for _, e := range c.EnvFrom {
				secret = secret || e.SecretRef != nil
				configMap = configMap || e.ConfigMapRef != nil
			}
			for _, e := range c.Env {
				if e.ValueFrom != nil {
					secret = secret || e.ValueFrom.SecretKeyRef != nil
					configMap = configMap || e.ValueFrom.ConfigMapKeyRef != nil
				}
			}
		}
	}
	for _, v := range spec.Volumes {
		secret = secret || v.Secret != nil || (v.Projected != nil && hasProjected(v.Projected, func(s corev1.VolumeProjection) bool { return s.Secret != nil })) ||
			(v.AzureFile != nil) || (v.CephFS != nil && v.CephFS.SecretRef != nil) || (v.Cinder != nil && v.Cinder.SecretRef != nil) ||
			(v.FlexVolume != nil && v.FlexVolume.SecretRef != nil) || (v.RBD != nil && v.RBD.SecretRef != nil) ||
			(v.ScaleIO != nil && v.ScaleIO.SecretRef != nil) || (v.ISCSI != nil && v.ISCSI.SecretRef != nil) ||
			(v.StorageOS != nil && v.StorageOS.SecretRef != nil) || (v.CSI != nil && v.CSI.NodePublishSecretRef != nil)
		configMap = configMap || v.ConfigMap != nil || (v.Projected != nil && hasProjected(v.Projected, func(s corev1.VolumeProjection) bool { return s.ConfigMap != nil }))
	}
	switch {
	case secret:
		return "secrets"
	case configMap:
		return "configmaps"
	case len(spec.ResourceClaims) > 0:
		return "resourceclaims"
	}
	for _, v := range spec.Volumes {
		switch {
		case v.CSI != nil:
			return "csidrivers (via CSI volumes)"
		case v.Glusterfs != nil:
			return "endpoints (via glusterFS volumes)"
		case v.PersistentVolumeClaim != nil:
			return "persistentvolumeclaims"
		case v.Ephemeral != nil:
			return "persistentvolumeclaims (via ephemeral volumes)"
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				switch {
				case s.ServiceAccountToken != nil:
					return "serviceaccounts (via projected volumes)"
				case s.ClusterTrustBundle != nil:
					return "clustertrustbundles"
				case s.PodCertificate != nil:
					return "podcertificates"
				}
			}
		}
	}
	return ""
}

func hasProjected(p *corev1.ProjectedVolumeSource, f func(corev1.VolumeProjection) bool) bool {
	for _, s := range p.Sources {
		if f(s) {
			return true
		}
	}
	return false
}

// fieldErrors turns a validation result into one error that names every field.
func fieldErrors(errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("invalid pod: %w", errs.ToAggregate())
}
