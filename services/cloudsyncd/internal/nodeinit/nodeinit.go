package nodeinit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	cloudproviderapi "k8s.io/cloud-provider/api"
	nodehelpers "k8s.io/cloud-provider/node/helpers"
	nodeutil "k8s.io/component-helpers/node/util"

	"github.com/microlet/microlet/services/cloudsyncd/internal/provider"
)

// Source is where the controller learns about the instance; the sync
// manager is one.
type Source interface {
	NodeAddresses(ctx context.Context) ([]corev1.NodeAddress, error)
	InstanceMetadata(ctx context.Context) (*provider.Metadata, error)
	InstanceShutdown(ctx context.Context) (bool, error)
}

var (
	uninitializedTaint = &corev1.Taint{Key: cloudproviderapi.TaintExternalCloudProvider, Effect: corev1.TaintEffectNoSchedule}
	shutdownTaint      = &corev1.Taint{Key: cloudproviderapi.TaintNodeShutdown, Effect: corev1.TaintEffectNoSchedule}
)

// probeTaintKey is the taint a dry-run adds to prove the credential may
// change taints; dry-run means it never lands.
const probeTaintKey = "cloudsyncd.microlet.io/credential-check"

// ErrCredential marks a credential that cannot do node initialisation.
var ErrCredential = errors.New("credential cannot initialise the node")

// Controller initialises one Node.
type Controller struct {
	client kubernetes.Interface
	node   string
	src    Source
	log    *slog.Logger
	period time.Duration
}

// Option configures New.
type Option func(*Controller)

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(c *Controller) { c.log = l } }

// WithPeriod sets how often the provider's shutdown state is checked and a
// failed initialisation is retried.
func WithPeriod(d time.Duration) Option { return func(c *Controller) { c.period = d } }

// New returns a controller for node using client's credential.
func New(client kubernetes.Interface, node string, src Source, opts ...Option) *Controller {
	c := &Controller{client: client, node: node, src: src, log: slog.Default(), period: 10 * time.Second}
	for _, o := range opts {
		o(c)
	}
	return c
}

// whoAmI names the credential for messages; "" when the API will not say.
func (c *Controller) whoAmI(ctx context.Context) string {
	r, err := c.client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return ""
	}
	return r.Status.UserInfo.Username
}

// CheckAccess is the startup check: may the credential update and patch
// Nodes at all? It needs no Node to exist.
func (c *Controller) CheckAccess(ctx context.Context) error {
	user := c.whoAmI(ctx)
	for _, verb := range []string{"update", "patch"} {
		r, err := c.client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: verb, Resource: "nodes", Name: c.node,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("access review as %s: %w", orUnknown(user), err)
		}
		if !r.Status.Allowed {
			return fmt.Errorf("%w: %s may not %s node %s (%s)", ErrCredential, orUnknown(user), verb, c.node, r.Status.Reason)
		}
	}
	return nil
}

// CheckTaints proves, with a server-side dry run, that the credential may
// change the Node's taints. Authorization alone does not tell: the
// NodeRestriction admission plugin refuses a node's own identity here.
func (c *Controller) CheckTaints(ctx context.Context, node *corev1.Node) error {
	taints := append([]corev1.Taint{}, node.Spec.Taints...)
	taints = append(taints, corev1.Taint{Key: probeTaintKey, Effect: corev1.TaintEffectNoSchedule})
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
		"spec":     map[string]any{"taints": taints},
	})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Nodes().Patch(ctx, c.node, types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	if apierrors.IsConflict(err) {
		return nil // the Node moved on; the write would have been admitted
	}
	if err != nil {
		user := c.whoAmI(ctx)
		hint := ""
		if strings.HasPrefix(user, "system:node:") {
			hint = "; a node identity cannot change taints (NodeRestriction), set cloud_kubeconfig to a cloud-controller credential"
		}
		return fmt.Errorf("%w: %s may not change the taints of node %s: %s%s", ErrCredential, orUnknown(user), c.node, oneLine(err), hint)
	}
	return nil
}

func orUnknown(user string) string {
	if user == "" {
		return "this credential"
	}
	return user
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// Run watches the Node and reconciles it every period and on each change,
// until ctx ends. A credential that cannot do the job ends Run early with one
// error log line; nothing else in the process depends on it.
func (c *Controller) Run(ctx context.Context) {
	// An API server that is down is retried with backoff; only a credential
	// that is refused ends the controller.
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 30 * time.Second}
	for {
		err := c.CheckAccess(ctx)
		if err == nil {
			break
		}
		if errors.Is(err, ErrCredential) {
			c.log.Error("cloud node initialisation disabled: " + oneLine(err))
			return
		}
		c.log.Warn("cloud node initialisation: cannot check the credential yet, retrying", "err", oneLine(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff.Step()):
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(c.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", c.node).String()
		}))
	inf := factory.Core().V1().Nodes()
	kick := make(chan struct{}, 1)
	notify := func(any) {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, n any) { notify(n) },
	})
	if err != nil {
		c.log.Error("cloud node initialisation disabled: " + oneLine(err))
		return
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	lister := inf.Lister()

	checked := false
	t := time.NewTicker(c.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-t.C:
		}
		node, err := lister.Get(c.node)
		if apierrors.IsNotFound(err) {
			continue // nodestatusd registers it; we come back on the add event
		}
		if err != nil {
			c.log.Warn("cloud node initialisation: reading the Node", "err", err)
			continue
		}
		if !checked {
			if err := c.CheckTaints(ctx, node); err != nil {
				if errors.Is(err, ErrCredential) {
					c.log.Error("cloud node initialisation disabled: " + oneLine(err))
					return
				}
				c.log.Warn("cloud node initialisation: credential check failed, retrying", "err", err)
				continue
			}
			checked = true
			c.log.Info("cloud node initialisation: credential can change the Node's taints", "node", c.node)
		}
		if err := c.Reconcile(ctx, node); err != nil {
			c.log.Warn("cloud node initialisation: will retry", "node", c.node, "err", err)
		}
	}
}

// Reconcile initialises node if it carries the uninitialized taint and puts
// the shutdown taint in step with the provider.
func (c *Controller) Reconcile(ctx context.Context, node *corev1.Node) error {
	var errs []error
	if hasTaint(node, uninitializedTaint.Key) {
		if err := c.initialise(ctx, node); err != nil {
			errs = append(errs, fmt.Errorf("initialise: %w", err))
		}
	}
	down, err := c.src.InstanceShutdown(ctx)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("shutdown state: %w", err))
	case down && !hasTaint(node, shutdownTaint.Key):
		c.log.Info("instance is shut down: tainting the Node", "node", c.node, "taint", shutdownTaint.Key)
		if err := nodehelpers.AddOrUpdateTaintOnNode(c.client, c.node, shutdownTaint); err != nil {
			errs = append(errs, fmt.Errorf("add shutdown taint: %w", err))
		}
	case !down && hasTaint(node, shutdownTaint.Key):
		c.log.Info("instance is running again: removing the shutdown taint", "node", c.node)
		if err := nodehelpers.RemoveTaintOffNode(c.client, c.node, node, shutdownTaint); err != nil {
			errs = append(errs, fmt.Errorf("remove shutdown taint: %w", err))
		}
	}
	return errors.Join(errs...)
}

// initialise does what the cloud-node controller does for a new Node; node
// is the current object (not modified).
func (c *Controller) initialise(ctx context.Context, node *corev1.Node) error {
	md, err := c.src.InstanceMetadata(ctx)
	if err != nil {
		return err
	}
	addrs := md.Addresses
	if len(addrs) == 0 {
		if addrs, err = c.src.NodeAddresses(ctx); err != nil {
			return err
		}
	}
	// Addresses first, on the status subresource, through the patch the
	// kubelet and the cloud-node controller use (it replaces the list
	// whole, so several addresses of one type survive).
	if len(addrs) > 0 {
		// PatchNodeStatus takes no context.
		if err := ctx.Err(); err != nil {
			return err
		}
		updated := node.DeepCopy()
		updated.Status.Addresses = addrs
		if _, _, err := nodeutil.PatchNodeStatus(c.client.CoreV1(), types.NodeName(c.node), node, updated); err != nil {
			return fmt.Errorf("addresses: %w", err)
		}
	}
	labels := map[string]string{}
	for k, v := range md.AdditionalLabels {
		labels[k] = v
	}
	for _, l := range []struct {
		value        string
		stable, beta string
	}{
		{md.InstanceType, corev1.LabelInstanceTypeStable, corev1.LabelInstanceType},
		{md.Zone, corev1.LabelTopologyZone, corev1.LabelFailureDomainBetaZone},
		{md.Region, corev1.LabelTopologyRegion, corev1.LabelFailureDomainBetaRegion},
	} {
		if l.value != "" {
			labels[l.stable], labels[l.beta] = l.value, l.value
		}
	}
	// Labels, provider ID and the taint in one update, so the Node never
	// looks initialised without its cloud identity.
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		node, err := c.client.CoreV1().Nodes().Get(ctx, c.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !hasTaint(node, uninitializedTaint.Key) {
			return nil // someone else finished it
		}
		node = node.DeepCopy()
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		for k, v := range labels {
			node.Labels[k] = v
		}
		if node.Spec.ProviderID == "" {
			node.Spec.ProviderID = md.ProviderID
		}
		var kept []corev1.Taint
		for _, t := range node.Spec.Taints {
			if t.Key != uninitializedTaint.Key {
				kept = append(kept, t)
			}
		}
		node.Spec.Taints = kept
		_, err = c.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	c.log.Info("node initialised from the cloud provider", "node", c.node, "provider_id", md.ProviderID,
		"instance_type", md.InstanceType, "zone", md.Zone, "region", md.Region, "addresses", len(addrs))
	return nil
}

func hasTaint(node *corev1.Node, key string) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}
