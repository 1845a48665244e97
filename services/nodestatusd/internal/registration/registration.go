package registration

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	cloudproviderapi "k8s.io/cloud-provider/api"
	nodeutil "k8s.io/component-helpers/node/util"
	kubeletapis "k8s.io/kubelet/pkg/apis"

	"github.com/microlet/microlet/internal/version"
	cloudsyncv1 "github.com/microlet/microlet/proto/microlet/cloudsync/v1"
)

// AnnotationControllerManagedAttachDetach tells the attach/detach controller it
// owns this node's volume attachments, as the kubelet says. It is the one key
// the kubelet sets that client libraries do not name.
const AnnotationControllerManagedAttachDetach = "volumes.kubernetes.io/controller-managed-attach-detach"

// Options say what to register.
type Options struct {
	// NodeName is the Node's name.
	NodeName string
	// Hostname is the kubernetes.io/hostname label (the node name by default).
	Hostname string
	// Labels are --node-labels; they override default labels (logged).
	Labels map[string]string
	// Taints are --register-with-taints.
	Taints []corev1.Taint
	// Unschedulable registers the node cordoned, with the unschedulable taint.
	Unschedulable bool
	// ExternalCloudProvider adds the uninitialized taint for a cloud controller.
	ExternalCloudProvider bool
	// ExtraLabels are added without being reconciled (e.g. simulation markers).
	ExtraLabels map[string]string
	// MicroletVersion, when set, is written to the version.AnnotationVersion
	// annotation (kubeletVersion holds the Kubernetes release instead).
	MicroletVersion string
	// DeclaredFeatures is status.declaredFeatures of the created Node (the
	// kubelet fills the status of the Node it creates): the scheduler and
	// the API server's pod checks read it from the first moment the Node
	// exists, before the first status update.
	DeclaredFeatures []string
}

// InitialNode is the Node as first registered. md may be nil (no cloud).
func InitialNode(o Options, md *cloudsyncv1.GetInstanceMetadataResponse, log *slog.Logger) *corev1.Node {
	hostname := o.Hostname
	if hostname == "" {
		hostname = o.NodeName
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: o.NodeName,
			Labels: map[string]string{
				corev1.LabelHostname:   hostname,
				corev1.LabelOSStable:   runtime.GOOS,
				corev1.LabelArchStable: runtime.GOARCH,
				kubeletapis.LabelOS:    runtime.GOOS,
				kubeletapis.LabelArch:  runtime.GOARCH,
			},
			Annotations: map[string]string{AnnotationControllerManagedAttachDetach: "true"},
		},
		Spec:   corev1.NodeSpec{Unschedulable: o.Unschedulable},
		Status: corev1.NodeStatus{DeclaredFeatures: slices.Clone(o.DeclaredFeatures)},
	}
	if o.MicroletVersion != "" {
		node.Annotations[version.AnnotationVersion] = o.MicroletVersion
	}
	maps.Copy(node.Labels, o.ExtraLabels)
	node.Spec.Taints = append(node.Spec.Taints, o.Taints...)
	addTaint := func(t corev1.Taint) {
		for _, have := range node.Spec.Taints {
			if have.MatchTaint(&t) {
				return
			}
		}
		node.Spec.Taints = append(node.Spec.Taints, t)
	}
	if o.Unschedulable {
		addTaint(corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	}
	if o.ExternalCloudProvider {
		addTaint(corev1.Taint{Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: corev1.TaintEffectNoSchedule})
	}
	if md != nil {
		node.Spec.ProviderID = md.GetProviderId()
		set := func(v string, keys ...string) {
			if v == "" {
				return
			}
			for _, k := range keys {
				node.Labels[k] = v
			}
		}
		set(md.GetInstanceType(), corev1.LabelInstanceTypeStable, corev1.LabelInstanceType)
		set(md.GetZone(), corev1.LabelTopologyZone, corev1.LabelFailureDomainBetaZone)
		set(md.GetRegion(), corev1.LabelTopologyRegion, corev1.LabelFailureDomainBetaRegion)
		for k, v := range md.GetAdditionalLabels() {
			node.Labels[k] = v
		}
	}
	for _, k := range slices.Sorted(maps.Keys(o.Labels)) {
		if old, ok := node.Labels[k]; ok && old != o.Labels[k] && log != nil {
			log.Warn("node label overrides a default label", "label", k, "default", old, "value", o.Labels[k])
		}
		node.Labels[k] = o.Labels[k]
	}
	return node
}

// DefaultLabelKeys are the labels reconciled on an existing Node, as the
// kubelet's updateDefaultLabels does.
var DefaultLabelKeys = []string{
	corev1.LabelHostname,
	corev1.LabelTopologyZone,
	corev1.LabelTopologyRegion,
	corev1.LabelFailureDomainBetaZone,
	corev1.LabelFailureDomainBetaRegion,
	corev1.LabelInstanceTypeStable,
	corev1.LabelInstanceType,
	corev1.LabelOSStable,
	corev1.LabelArchStable,
	kubeletapis.LabelOS,
	kubeletapis.LabelArch,
}

// ReconcileLabels copies the default labels of initial onto existing, and
// its annotations microlet owns (attach-detach, microlet's version, so an
// upgraded microlet says so), and reports whether anything changed.
// Labels initial does not set are left.
func ReconcileLabels(initial, existing *corev1.Node) bool {
	changed := false
	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	for _, k := range DefaultLabelKeys {
		want, ok := initial.Labels[k]
		if !ok {
			continue
		}
		if existing.Labels[k] != want {
			existing.Labels[k] = want
			changed = true
		}
		if want == "" {
			delete(existing.Labels, k)
		}
	}
	for _, k := range []string{AnnotationControllerManagedAttachDetach, version.AnnotationVersion} {
		want, ok := initial.Annotations[k]
		if k == version.AnnotationVersion && !ok {
			continue // not reporting a version is no reason to drop one
		}
		if existing.Annotations[k] != want {
			if existing.Annotations == nil {
				existing.Annotations = map[string]string{}
			}
			existing.Annotations[k] = want
			changed = true
		}
	}
	return changed
}

// Backoff of Register: the kubelet's 100 ms doubling to 7 s.
const (
	InitialBackoff = 100 * time.Millisecond
	MaxBackoff     = 7 * time.Second
)

// Register creates the Node, or reconciles an existing one, retrying until
// it succeeds or ctx ends. initial is called before every try so it can
// pick up cloud metadata that arrived meanwhile.
func Register(ctx context.Context, client kubernetes.Interface, initial func(context.Context) *corev1.Node, log *slog.Logger) error {
	delay := wait.Backoff{Duration: InitialBackoff, Factor: 2, Steps: math.MaxInt32, Cap: MaxBackoff}.DelayFunc()
	for {
		node := initial(ctx)
		err := TryRegister(ctx, client, node, log)
		if err == nil {
			return nil
		}
		step := delay()
		log.Warn("registering node failed, retrying", "node", node.Name, "in", step, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(step):
		}
	}
}

// TryRegister makes one attempt: create, else get and reconcile labels.
func TryRegister(ctx context.Context, client kubernetes.Interface, node *corev1.Node, log *slog.Logger) error {
	_, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err == nil {
		log.Info("registered node", "node", node.Name)
		return nil
	}
	if !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
		return fmt.Errorf("create node %s: %w", node.Name, err)
	}
	existing, gerr := client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if gerr != nil {
		return fmt.Errorf("node %s exists but get failed: %w (create said: %v)", node.Name, gerr, err)
	}
	original := existing.DeepCopy()
	if ReconcileLabels(node, existing) {
		if _, _, err := nodeutil.PatchNodeStatus(client.CoreV1(), types.NodeName(node.Name), original, existing); err != nil {
			return fmt.Errorf("reconcile labels of node %s: %w", node.Name, err)
		}
		log.Info("node was registered before; labels reconciled", "node", node.Name)
		return nil
	}
	log.Info("node was registered before", "node", node.Name)
	return nil
}

// ValidateNodeName checks the name is a DNS subdomain, as Node names must be.
func ValidateNodeName(name string) error {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("node_name %q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// kubeletLabelNamespaces are the kubernetes.io label namespaces a node may
// set on itself (NodeRestriction refuses the rest).
var kubeletLabelNamespaces = []string{"kubelet.kubernetes.io", "node.kubernetes.io"}

var kubeletLabels = map[string]bool{
	corev1.LabelHostname: true, corev1.LabelTopologyZone: true, corev1.LabelTopologyRegion: true,
	corev1.LabelFailureDomainBetaZone: true, corev1.LabelFailureDomainBetaRegion: true,
	corev1.LabelInstanceType: true, corev1.LabelInstanceTypeStable: true,
	corev1.LabelOSStable: true, corev1.LabelArchStable: true, kubeletapis.LabelOS: true, kubeletapis.LabelArch: true,
}

// ValidateLabels checks --node-labels: valid keys and values, and no
// kubernetes.io or k8s.io label the node may not set on itself.
func ValidateLabels(labels map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("node_labels: key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(labels[k]); len(errs) > 0 {
			return fmt.Errorf("node_labels: value %q of %q: %s", labels[k], k, strings.Join(errs, "; "))
		}
		prefix, _, ok := strings.Cut(k, "/")
		if !ok || kubeletLabels[k] {
			continue
		}
		if !isKubernetesNamespace(prefix) {
			continue
		}
		allowed := false
		for _, ns := range kubeletLabelNamespaces {
			if prefix == ns || strings.HasSuffix(prefix, "."+ns) {
				allowed = true
			}
		}
		if !allowed {
			return fmt.Errorf("node_labels: key %q: a node may not set kubernetes.io or k8s.io labels other than its own (node.kubernetes.io/, kubelet.kubernetes.io/ and the well-known ones)", k)
		}
	}
	return nil
}

func isKubernetesNamespace(prefix string) bool {
	for _, ns := range []string{"kubernetes.io", "k8s.io"} {
		if prefix == ns || strings.HasSuffix(prefix, "."+ns) {
			return true
		}
	}
	return false
}

// ParseTaints parses --register-with-taints entries "key[=value]:Effect".
func ParseTaints(specs []string) ([]corev1.Taint, error) {
	var out []corev1.Taint
	seen := map[string]bool{}
	for _, s := range specs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		kv, effect, ok := strings.Cut(s, ":")
		if !ok {
			return nil, fmt.Errorf("register_with_taints: %q: want key[=value]:Effect", s)
		}
		key, value, _ := strings.Cut(kv, "=")
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			return nil, fmt.Errorf("register_with_taints: %q: key: %s", s, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
			return nil, fmt.Errorf("register_with_taints: %q: value: %s", s, strings.Join(errs, "; "))
		}
		e := corev1.TaintEffect(effect)
		switch e {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return nil, fmt.Errorf("register_with_taints: %q: effect %q is not NoSchedule, PreferNoSchedule or NoExecute", s, effect)
		}
		if seen[key+":"+effect] {
			return nil, fmt.Errorf("register_with_taints: %q: given twice", s)
		}
		seen[key+":"+effect] = true
		out = append(out, corev1.Taint{Key: key, Value: value, Effect: e})
	}
	return out, nil
}
