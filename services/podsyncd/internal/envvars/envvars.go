package envvars

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/kubectl/pkg/util/fieldpath"
	kubectlresource "k8s.io/kubectl/pkg/util/resource"

	"github.com/microlet/microlet/internal/podutil"
)

// Source reads the objects a pod refers to. Errors that are NotFound
// (apierrors.IsNotFound) let optional references be skipped.
type Source interface {
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// Info is what the node knows about the pod beyond its spec.
type Info struct {
	// PodIPs are the sandbox's IPs (the API status may not have them yet).
	PodIPs []string
	// HostIPs are the node's addresses.
	HostIPs []string
	// Allocatable is the node's allocatable resources: a resourceFieldRef to
	// an unset limit reports it, as upstream does.
	Allocatable corev1.ResourceList
	// ServiceEnv are the service-link variables (ServiceEnv): they can be
	// referenced by $(VAR) and are added after the container's own, which
	// win over them.
	ServiceEnv map[string]string
	// VolumePaths are the host paths of the pod's volumes by name, where a
	// fileKeyRef's env file is read; nil when the node set up none.
	VolumePaths map[string]string
}

// Var is one resolved variable.
type Var struct {
	Name, Value string
}

// Resolve returns the container's environment in order (envFrom entries,
// then env entries; a later name replaces an earlier one in place), then the
// service-link variables the container does not set itself, by name.
func Resolve(ctx context.Context, pod *corev1.Pod, c *corev1.Container, src Source, info Info) ([]Var, error) {
	var out []Var
	index := map[string]int{}
	set := func(name, value string) {
		if i, ok := index[name]; ok {
			out[i].Value = value
			return
		}
		index[name] = len(out)
		out = append(out, Var{name, value})
	}
	vals := func() map[string]string {
		m := make(map[string]string, len(out)+len(info.ServiceEnv))
		for k, v := range info.ServiceEnv {
			m[k] = v
		}
		for _, v := range out {
			m[v.Name] = v.Value
		}
		return m
	}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			ref := from.ConfigMapRef
			cm, err := get(ctx, src, pod.Namespace, ref.Name, ref.Optional, false)
			if err != nil {
				return nil, err
			}
			if cm == nil {
				continue
			}
			for k, v := range cm.(*corev1.ConfigMap).Data {
				if name := from.Prefix + k; envFromName(name) {
					set(name, v)
				}
			}
		case from.SecretRef != nil:
			ref := from.SecretRef
			s, err := get(ctx, src, pod.Namespace, ref.Name, ref.Optional, true)
			if err != nil {
				return nil, err
			}
			if s == nil {
				continue
			}
			for k, v := range s.(*corev1.Secret).Data {
				if name := from.Prefix + k; envFromName(name) {
					set(name, string(v))
				}
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, Expand(e.Value, vals()))
			continue
		}
		v, ok, err := valueFrom(ctx, pod, c, src, info, e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			set(e.Name, v)
		}
	}
	for _, k := range sortedKeys(info.ServiceEnv) {
		if _, ok := index[k]; !ok {
			index[k] = len(out)
			out = append(out, Var{k, info.ServiceEnv[k]})
		}
	}
	return out, nil
}

// envFromName reports whether an envFrom entry's name (prefix + key) can
// be passed on. Since RelaxedEnvironmentVariableValidation (GA) the API
// accepts any printable ASCII but '=' in names, and the kubelet passes every
// envFrom key through unchecked ("1-data", "$_-data", "#@!data"); only a
// name the runtime could not represent (empty, '=', control characters) is
// dropped here, which API validation already rules out.
func envFromName(name string) bool { return len(validation.IsRelaxedEnvVarName(name)) == 0 }

// get fetches a ConfigMap (or Secret); nil without error when it is missing
// and optional.
func get(ctx context.Context, src Source, ns, name string, optional *bool, secret bool) (any, error) {
	opt := optional != nil && *optional
	var (
		obj any
		err error
	)
	if src == nil {
		kind := "configmap"
		if secret {
			kind = "secret"
		}
		err = fmt.Errorf("%s %q cannot be read: this node runs without an API server", kind, name)
	} else if secret {
		obj, err = src.Secret(ctx, ns, name)
	} else {
		obj, err = src.ConfigMap(ctx, ns, name)
	}
	switch {
	case err == nil:
		return obj, nil
	case opt && (apierrors.IsNotFound(err) || src == nil):
		return nil, nil
	}
	return nil, err
}

func valueFrom(ctx context.Context, pod *corev1.Pod, c *corev1.Container, src Source, info Info, from *corev1.EnvVarSource) (string, bool, error) {
	switch {
	case from.FieldRef != nil:
		v, err := FieldValue(pod, from.FieldRef.FieldPath, info)
		return v, err == nil, err
	case from.ResourceFieldRef != nil:
		v, err := ResourceValue(pod, c, from.ResourceFieldRef, info.Allocatable)
		return v, err == nil, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		obj, err := get(ctx, src, pod.Namespace, ref.Name, ref.Optional, false)
		if err != nil || obj == nil {
			return "", false, err
		}
		cm := obj.(*corev1.ConfigMap)
		if v, ok := cm.Data[ref.Key]; ok {
			return v, true, nil
		}
		if v, ok := cm.BinaryData[ref.Key]; ok {
			return string(v), true, nil
		}
		if ref.Optional != nil && *ref.Optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		obj, err := get(ctx, src, pod.Namespace, ref.Name, ref.Optional, true)
		if err != nil || obj == nil {
			return "", false, err
		}
		if v, ok := obj.(*corev1.Secret).Data[ref.Key]; ok {
			return string(v), true, nil
		}
		if ref.Optional != nil && *ref.Optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)
	case from.FileKeyRef != nil:
		if info.VolumePaths == nil {
			return "", false, errNoVolumes
		}
		return fileKeyValue(from.FileKeyRef, info.VolumePaths)
	}
	return "", false, errors.New("valueFrom names no source")
}

// FieldValue is the value of a downward-API field path. The node answers
// the spec and status paths itself (the IPs from info before the pod's
// status; a hostNetwork pod's IPs are the host's); the metadata paths are
// k8s.io/kubectl's fieldpath.ExtractFieldPathAsString, as the kubelet's:
// "metadata.labels['k']" is one label, "metadata.labels" the sorted
// key="value" lines a downward-API volume file holds.
func FieldValue(pod *corev1.Pod, path string, info Info) (string, error) {
	podIPs := info.PodIPs
	if len(podIPs) == 0 {
		for _, ip := range pod.Status.PodIPs {
			podIPs = append(podIPs, ip.IP)
		}
		if len(podIPs) == 0 && pod.Status.PodIP != "" {
			podIPs = []string{pod.Status.PodIP}
		}
	}
	hostIPs := info.HostIPs
	if len(hostIPs) == 0 && pod.Status.HostIP != "" {
		hostIPs = []string{pod.Status.HostIP}
	}
	if pod.Spec.HostNetwork && len(hostIPs) > 0 {
		podIPs = hostIPs
	}
	first := func(s []string) string {
		if len(s) == 0 {
			return ""
		}
		return s[0]
	}
	switch path {
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return first(hostIPs), nil
	case "status.hostIPs":
		return strings.Join(hostIPs, ","), nil
	case "status.podIP":
		return first(podIPs), nil
	case "status.podIPs":
		return strings.Join(podIPs, ","), nil
	}
	return fieldpath.ExtractFieldPathAsString(pod, path)
}

// ResourceValue is a resourceFieldRef's value, as the kubelet computes it:
// the named container's (self when ref names none) limit or request,
// divided by the divisor and rounded up (k8s.io/kubectl's
// ExtractContainerResourceValue). An unset or zero cpu, memory or
// ephemeral-storage limit is the node's allocatable; hugepages limits are
// never defaulted (hugepages are not overcommitted). Resources other than
// those and hugepages-<size> are refused.
func ResourceValue(pod *corev1.Pod, self *corev1.Container, ref *corev1.ResourceFieldSelector, allocatable corev1.ResourceList) (string, error) {
	c := self
	if ref.ContainerName != "" && ref.ContainerName != self.Name {
		c = podutil.FindContainer(pod, ref.ContainerName, false)
		if c == nil {
			return "", fmt.Errorf("resourceFieldRef: no container %q", ref.ContainerName)
		}
	}
	defaulted := corev1.Container{Name: c.Name, Resources: *c.Resources.DeepCopy()}
	if defaulted.Resources.Limits == nil {
		defaulted.Resources.Limits = corev1.ResourceList{}
	}
	for _, rn := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		if lim, ok := defaulted.Resources.Limits[rn]; ok && !lim.IsZero() {
			continue
		}
		if a, ok := allocatable[rn]; ok {
			defaulted.Resources.Limits[rn] = a.DeepCopy()
		}
	}
	return kubectlresource.ExtractContainerResourceValue(ref, &defaulted)
}

// Expand replaces $(VAR) with earlier values; $$ escapes a dollar and an
// unknown reference stays as written.
func Expand(s string, vals map[string]string) string {
	return expand(s, func(name string) (string, bool) {
		v, ok := vals[name]
		return v, ok
	})
}

// ExpandSubPath expands a volumeMount's subPathExpr with the container's
// environment under the kubelet's stricter rule: every variable it names
// must be set and non-empty, else the error lists the missing ones (sorted)
// and the container is not created.
func ExpandSubPath(expr string, vals map[string]string) (string, error) {
	missing := map[string]bool{}
	out := expand(expr, func(name string) (string, bool) {
		v := vals[name]
		if v == "" {
			missing[name] = true
		}
		return v, true
	})
	if len(missing) > 0 {
		names := make([]string, 0, len(missing))
		for k := range missing {
			names = append(names, k)
		}
		sort.Strings(names)
		return "", fmt.Errorf("missing value for %s", strings.Join(names, ", "))
	}
	return out, nil
}

// expand is $(VAR) expansion; lookup's false keeps the reference as written.
func expand(s string, lookup func(name string) (string, bool)) string {
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
			if v, ok := lookup(name); ok {
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
