package podruntime

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kubelettypes "k8s.io/kubelet/pkg/types"
	"k8s.io/utils/dump"

	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
)

// Label and annotation keys, the same as the kubelet's so tools that know the
// kubelet's conventions (crictl filters, log shippers) work unchanged. The
// four k8s.io/kubelet names come from there; the rest the kubelet keeps
// inside its own tree.
const (
	LabelPodName        = kubelettypes.KubernetesPodNameLabel
	LabelPodNamespace   = kubelettypes.KubernetesPodNamespaceLabel
	LabelPodUID         = kubelettypes.KubernetesPodUIDLabel
	LabelContainerName  = kubelettypes.KubernetesContainerNameLabel
	LabelContainerType  = "io.kubernetes.container.type"
	AnnotationHash      = "io.kubernetes.container.hash"
	AnnotationRestarts  = "io.kubernetes.container.restartCount"
	AnnotationGrace     = "io.kubernetes.pod.terminationGracePeriod"
	AnnotationTermPath  = "io.kubernetes.container.terminationMessagePath"
	AnnotationPolicy    = "io.kubernetes.container.terminationMessagePolicy"
	containerTypeInit   = "init"
	containerTypeNormal = "container"
	// containerTypeEphemeral marks an ephemeral container (kubectl debug).
	containerTypeEphemeral = "ephemeral"
)

// metricLabel is the kind's container_type in the kubelet's metrics.
func (k containerKind) metricLabel() string {
	switch k {
	case kindInit:
		return kubeletmetrics.ContainerTypeInit
	case kindEphemeral:
		return kubeletmetrics.ContainerTypeEphemeral
	}
	return kubeletmetrics.ContainerTypeContainer
}

// containerKind is the list of the pod spec a container comes from.
type containerKind int

const (
	kindRegular containerKind = iota
	kindInit
	kindEphemeral
)

// sandboxLabels are the pod's labels plus the identity labels.
func sandboxLabels(pod *corev1.Pod) map[string]string {
	l := map[string]string{}
	for k, v := range pod.Labels {
		l[k] = v
	}
	l[LabelPodName] = pod.Name
	l[LabelPodNamespace] = pod.Namespace
	l[LabelPodUID] = string(pod.UID)
	return l
}

func containerLabels(pod *corev1.Pod, c *corev1.Container, kind containerKind) map[string]string {
	t := containerTypeNormal
	switch kind {
	case kindInit:
		t = containerTypeInit
	case kindEphemeral:
		t = containerTypeEphemeral
	}
	return map[string]string{
		LabelPodName:       pod.Name,
		LabelPodNamespace:  pod.Namespace,
		LabelPodUID:        string(pod.UID),
		LabelContainerName: c.Name,
		LabelContainerType: t,
	}
}

func containerAnnotations(pod *corev1.Pod, c *corev1.Container, restarts int) map[string]string {
	a := map[string]string{
		AnnotationHash:     HashContainer(c),
		AnnotationRestarts: strconv.Itoa(restarts),
		AnnotationTermPath: c.TerminationMessagePath,
		AnnotationPolicy:   string(c.TerminationMessagePolicy),
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		a[AnnotationGrace] = strconv.FormatInt(*pod.Spec.TerminationGracePeriodSeconds, 10)
	}
	return a
}

// HashContainer is the kubelet's container hash (pkg/kubelet/container's
// HashContainer), in hex as the kubelet writes it into the hash annotation:
// FNV-32a over the hash dump of the JSON of the container's name and image,
// the only fields whose change restarts a running container. Everything else
// (resources and resizePolicy above all, so a resize alone never restarts a
// container) is left out, as upstream does.
func HashContainer(c *corev1.Container) string {
	data, _ := json.Marshal(map[string]string{"name": c.Name, "image": c.Image})
	h := fnv.New32a()
	_, _ = fmt.Fprintf(h, "%v", dump.ForHash(data))
	return strconv.FormatUint(uint64(h.Sum32()), 16)
}

// PodLogDir is where a pod's container logs live: <root>/<ns>_<name>_<uid>,
// the layout `kubectl logs` and log shippers expect.
func PodLogDir(root, namespace, name string, uid types.UID) string {
	return filepath.Join(root, fmt.Sprintf("%s_%s_%s", namespace, name, uid))
}

// containerLogPath is relative to the pod log dir: <container>/<restart>.log.
func containerLogPath(name string, restarts int) string {
	return filepath.Join(name, fmt.Sprintf("%d.log", restarts))
}
