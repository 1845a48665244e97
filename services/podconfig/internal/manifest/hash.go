package manifest

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/dump"

	"github.com/microlet/microlet/services/podconfig/internal/manifest/internal/core"
)

// dumpForHash renders pod exactly as upstream's hash input: its value in the
// internal API layout (type names, field order, the host-namespace fields
// moved into the pod security context), printed by k8s.io/utils/dump.ForHash,
// the same printer upstream's hash helper uses.
func dumpForHash(pod *corev1.Pod) string {
	var out core.Pod
	convert(reflect.ValueOf(&out).Elem(), reflect.ValueOf(pod).Elem())
	// TypeMeta of an internal object is always empty.
	out.TypeMeta.Kind, out.TypeMeta.APIVersion = "", ""
	if out.Spec.SecurityContext == nil {
		out.Spec.SecurityContext = &core.PodSecurityContext{}
	}
	sc := out.Spec.SecurityContext
	sc.HostNetwork = pod.Spec.HostNetwork
	sc.HostPID = pod.Spec.HostPID
	sc.HostIPC = pod.Spec.HostIPC
	sc.ShareProcessNamespace = pod.Spec.ShareProcessNamespace
	sc.HostUsers = pod.Spec.HostUsers
	return dump.ForHash(&out)
}

// convert copies src (a k8s.io/api value) into dst (its mirror of the
// internal type) field by field, by name. Fields only one side has are left
// alone; the caller fixes up the few that moved.
func convert(dst, src reflect.Value) {
	if dst.Type() == src.Type() {
		dst.Set(src)
		return
	}
	switch dst.Kind() {
	case reflect.Struct:
		st := src.Type()
		dt := dst.Type()
		for i := 0; i < dt.NumField(); i++ {
			f, ok := st.FieldByName(dt.Field(i).Name)
			if !ok || len(f.Index) != 1 {
				continue
			}
			convert(dst.Field(i), src.Field(f.Index[0]))
		}
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		p := reflect.New(dst.Type().Elem())
		convert(p.Elem(), src.Elem())
		dst.Set(p)
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		s := reflect.MakeSlice(dst.Type(), src.Len(), src.Len())
		for i := 0; i < src.Len(); i++ {
			convert(s.Index(i), src.Index(i))
		}
		dst.Set(s)
	case reflect.Map:
		if src.IsNil() {
			return
		}
		m := reflect.MakeMapWithSize(dst.Type(), src.Len())
		it := src.MapRange()
		for it.Next() {
			k := reflect.New(dst.Type().Key()).Elem()
			convert(k, it.Key())
			v := reflect.New(dst.Type().Elem()).Elem()
			convert(v, it.Value())
			m.SetMapIndex(k, v)
		}
		dst.Set(m)
	default:
		dst.Set(src.Convert(dst.Type()))
	}
}
