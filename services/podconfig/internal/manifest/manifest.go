package manifest

import (
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/microlet/microlet/internal/podsource"
)

// MaxSize is the largest manifest accepted (upstream's limit too).
const MaxSize = 10 << 20

// ErrTooLarge is returned for a manifest over MaxSize.
var ErrTooLarge = fmt.Errorf("manifest larger than %d bytes", MaxSize)

// ErrNotPod means the bytes decoded but to something other than the kinds
// asked for; callers use it to try the next kind.
var ErrNotPod = errors.New("not a pod")

// Source says where a manifest came from; it is part of the UID.
type Source struct {
	// NodeName is this node's name.
	NodeName string
	// Location is the file path or the URL.
	Location string
	// File is true for the file source: the UID also covers the node name
	// and the pod gets the NoExecute toleration.
	File bool
}

var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

func init() {
	if err := corev1.AddToScheme(scheme); err != nil {
		panic(err)
	}
}

// decode turns YAML or JSON into a typed core/v1 object. Like upstream it
// goes through JSON first, so both formats decode identically.
func decode(data []byte) (runtime.Object, error) {
	if len(data) > MaxSize {
		return nil, ErrTooLarge
	}
	js, err := utilyaml.ToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not YAML or JSON: %w", err)
	}
	obj, _, err := codecs.UniversalDeserializer().Decode(js, nil, nil)
	if err != nil {
		return nil, err
	}
	return obj, nil
}

// ParsePod decodes one Pod manifest and gives it the kubelet's defaults. An
// error that wraps ErrNotPod means the bytes are some other object.
func ParsePod(data []byte, src Source) (*corev1.Pod, error) {
	obj, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotPod, err)
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("%w: got %s", ErrNotPod, kindOf(obj))
	}
	if err := complete(pod, src); err != nil {
		return nil, err
	}
	return pod, nil
}

// ParsePods decodes the body of a manifest URL: a Pod or a PodList. A list is
// refused whole when one of its pods is invalid, as upstream does.
func ParsePods(data []byte, src Source) ([]*corev1.Pod, error) {
	obj, err := decode(data)
	if err != nil {
		return nil, err
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		if err := complete(o, src); err != nil {
			return nil, err
		}
		return []*corev1.Pod{o}, nil
	case *corev1.PodList:
		pods := make([]*corev1.Pod, 0, len(o.Items))
		for i := range o.Items {
			p := &o.Items[i]
			if err := complete(p, src); err != nil {
				return nil, fmt.Errorf("items[%d]: %w", i, err)
			}
			pods = append(pods, p)
		}
		return pods, nil
	default:
		return nil, fmt.Errorf("%w: got %s, want Pod or PodList", ErrNotPod, kindOf(obj))
	}
}

func kindOf(obj runtime.Object) string {
	if k := obj.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	return fmt.Sprintf("%T", obj)
}

// complete applies defaults, the UID, the static-pod fields and validation,
// in upstream's order: the hash covers the pod as written plus API defaults,
// before the name and node are filled in.
func complete(pod *corev1.Pod, src Source) error {
	if pod.Name == "" {
		return errors.New("invalid pod: metadata.name: Required value: name is needed for the pod")
	}
	pod.TypeMeta = metav1.TypeMeta{}
	setPodDefaults(pod)
	pod.Annotations = dropInitContainerAnnotations(pod.Annotations)
	if pod.Spec.ServiceAccountName == "" {
		pod.Spec.ServiceAccountName = pod.Spec.DeprecatedServiceAccount
	}
	if len(pod.Status.PodIP) > 0 && (len(pod.Status.PodIPs) == 0 || pod.Status.PodIPs[0].IP != pod.Status.PodIP) {
		pod.Status.PodIPs = []corev1.PodIP{{IP: pod.Status.PodIP}}
	}

	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		one := int64(1)
		pod.Spec.TerminationGracePeriodSeconds = &one
	}

	if pod.UID == "" {
		pod.UID = types.UID(hashUID(pod, src))
	}
	pod.Name = pod.Name + "-" + strings.ToLower(src.NodeName)
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	pod.Spec.NodeName = src.NodeName
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[podsource.HashAnnotation] = string(pod.UID)
	if src.File {
		addNoExecuteToleration(pod)
	}
	pod.Status.Phase = corev1.PodPending

	// What the kubelet hands on has been through the internal type and back,
	// which normalises these fields.
	pod.Spec.DeprecatedServiceAccount = pod.Spec.ServiceAccountName
	if len(pod.Status.PodIPs) > 0 {
		pod.Status.PodIP = pod.Status.PodIPs[0].IP
	}

	if err := fieldErrors(validate(pod)); err != nil {
		return err
	}
	if ref := apiReference(pod); ref != "" {
		return fmt.Errorf("static pods may not reference %s", ref)
	}
	return nil
}

// hashUID is upstream's static-pod UID: FNV-128a over the dump of the pod in
// its internal layout, then the node and file, or the URL.
func hashUID(pod *corev1.Pod, src Source) string {
	h := fnv.New128a()
	_, _ = h.Write([]byte(dumpForHash(pod)))
	if src.File {
		_, _ = fmt.Fprintf(h, "host:%s", src.NodeName)
		_, _ = fmt.Fprintf(h, "file:%s", src.Location)
	} else {
		_, _ = fmt.Fprintf(h, "url:%s", src.Location)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// addNoExecuteToleration keeps static pods on a node with NoExecute taints.
// Like upstream, tolerations matching it are replaced by it and it is
// appended when none matched; an identical one leaves the list alone.
func addNoExecuteToleration(pod *corev1.Pod) {
	want := corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}
	var out []corev1.Toleration
	updated := false
	for _, t := range pod.Spec.Tolerations {
		if want.MatchToleration(&t) {
			if t.TolerationSeconds == nil {
				return
			}
			out = append(out, want)
			updated = true
			continue
		}
		out = append(out, t)
	}
	if !updated {
		out = append(out, want)
	}
	pod.Spec.Tolerations = out
}

var initContainerAnnotations = map[string]bool{
	"pod.beta.kubernetes.io/init-containers":          true,
	"pod.alpha.kubernetes.io/init-containers":         true,
	"pod.beta.kubernetes.io/init-container-statuses":  true,
	"pod.alpha.kubernetes.io/init-container-statuses": true,
}

// dropInitContainerAnnotations removes the pre-1.6 init container annotations,
// as the API's conversion does before the kubelet hashes the pod.
func dropInitContainerAnnotations(in map[string]string) map[string]string {
	found := false
	for k := range in {
		if initContainerAnnotations[k] {
			found = true
			break
		}
	}
	if !found {
		return in
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		if !initContainerAnnotations[k] {
			out[k] = v
		}
	}
	return out
}
