package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	cloudproviderapi "k8s.io/cloud-provider/api"
	kubeletapis "k8s.io/kubelet/pkg/apis"

	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/version"
	"github.com/microlet/microlet/services/nodestatusd/internal/setters"
)

func adminClient(t *testing.T, cp *controlplane.ControlPlane) kubernetes.Interface {
	t.Helper()
	return clientFor(t, cp.AdminConfig())
}

func clientFor(t *testing.T, c *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func getNode(ctx context.Context, c kubernetes.Interface, name string) (*corev1.Node, error) {
	return c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

func TestRegistrationStatusAndLeaseWithNodeIdentity(t *testing.T) {
	cp := controlplane.Get(t)
	ctx := context.Background()
	const name = "nsd-reg-1"
	admin := adminClient(t, cp)
	r := startRig(t, rigOpts{kubeconfig: cp.NodeKubeconfig(name), node: name, mutate: func(c *Config) {
		c.NodeLabels = map[string]string{"node.kubernetes.io/pool": "blue", "example.com/team": "infra"}
		c.RegisterWithTaints = []string{"dedicated=db:NoSchedule"}
		c.RegisterSchedulable = false
		c.CloudProvider = "external"
	}})
	r.cloud.set(corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.10"}, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.1.1.10"})

	var node *corev1.Node
	eventually(t, "node registered and Ready", func() error {
		n, err := getNode(ctx, admin, name)
		if err != nil {
			return err
		}
		if c := condition(n, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
			return fmt.Errorf("Ready = %+v", c)
		}
		node = n
		return nil
	})
	wantLabels := map[string]string{
		corev1.LabelHostname: name, corev1.LabelOSStable: "linux", kubeletapis.LabelOS: "linux",
		corev1.LabelInstanceTypeStable: "m.small", corev1.LabelInstanceType: "m.small",
		corev1.LabelTopologyZone: "zone-a", corev1.LabelFailureDomainBetaZone: "zone-a",
		corev1.LabelTopologyRegion: "region-1", corev1.LabelFailureDomainBetaRegion: "region-1",
		"node.kubernetes.io/pool": "blue", "example.com/team": "infra",
	}
	for k, v := range wantLabels {
		if node.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, node.Labels[k], v)
		}
	}
	for _, key := range []string{"dedicated", corev1.TaintNodeUnschedulable, cloudproviderapi.TaintExternalCloudProvider} {
		if !slices.ContainsFunc(node.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == key }) {
			t.Errorf("taint %s missing: %+v", key, node.Spec.Taints)
		}
	}
	if !node.Spec.Unschedulable || node.Spec.ProviderID != "fake://i-123" {
		t.Errorf("spec = %+v", node.Spec)
	}
	if node.Status.NodeInfo.ContainerRuntimeVersion != "fakecri://0.1" || node.Status.NodeInfo.BootID == "" || len(node.Status.Images) != 1 {
		t.Errorf("status = %+v", node.Status.NodeInfo)
	}
	// kubeletVersion is the Kubernetes release, a version clients parse
	// (kubectl's skew warnings, e2e); microlet's own is an annotation.
	if v := node.Status.NodeInfo.KubeletVersion; v != version.Kubernetes {
		t.Errorf("kubeletVersion = %q, want %q", v, version.Kubernetes)
	} else if _, err := utilversion.ParseSemantic(v); err != nil {
		t.Errorf("kubeletVersion %q: %v", v, err)
	}
	if got := node.Annotations[version.AnnotationVersion]; got != version.Version {
		t.Errorf("annotation %s = %q, want %q", version.AnnotationVersion, got, version.Version)
	}
	// The field is deprecated; the check is that nothing fills it.
	if v := node.Status.NodeInfo.KubeProxyVersion; v != "" { //nolint:staticcheck // SA1019: checked to stay empty
		t.Errorf("kubeProxyVersion = %q, want it empty as the 1.36 kubelet leaves it", v)
	}

	// Lease: held by the node, 40 s, owned by the Node.
	eventually(t, "lease with owner", func() error {
		l, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != name || *l.Spec.LeaseDurationSeconds != 40 {
			return fmt.Errorf("lease spec %+v", l.Spec)
		}
		if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != node.UID {
			return fmt.Errorf("owner %+v, node uid %s", l.OwnerReferences, node.UID)
		}
		return nil
	})

	// Addresses follow the cloud and are replaced whole, not merged.
	eventually(t, "cloud addresses", func() error {
		n, err := getNode(ctx, admin, name)
		if err != nil {
			return err
		}
		want := []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: "203.0.113.10"}, {Type: corev1.NodeInternalIP, Address: "10.1.1.10"}, {Type: corev1.NodeHostName, Address: name}}
		if !equality.Semantic.DeepEqual(n.Status.Addresses, want) {
			return fmt.Errorf("addresses %+v", n.Status.Addresses)
		}
		return nil
	})
	r.cloud.set(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.1.1.11"})
	eventually(t, "addresses replaced", func() error {
		n, err := getNode(ctx, admin, name)
		if err != nil {
			return err
		}
		want := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.1.1.11"}, {Type: corev1.NodeHostName, Address: name}}
		if !equality.Semantic.DeepEqual(n.Status.Addresses, want) {
			return fmt.Errorf("addresses %+v", n.Status.Addresses)
		}
		return nil
	})

	// Another writer's condition survives; a reported one is merged in.
	patch := []byte(`{"status":{"conditions":[{"type":"OtherWriter","status":"True","reason":"Theirs"}]}}`)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	reportCondition(t, r, "npd", corev1.NodeCondition{Type: "KernelDeadlock", Status: corev1.ConditionFalse, Reason: "KernelHasNoDeadlock"})
	eventually(t, "reported condition on the Node, other writer's kept", func() error {
		n, err := getNode(ctx, admin, name)
		if err != nil {
			return err
		}
		if condition(n, "KernelDeadlock") == nil || condition(n, "OtherWriter") == nil {
			return fmt.Errorf("conditions %+v", n.Status.Conditions)
		}
		return nil
	})

	// Label drift is repaired.
	drift := []byte(`{"metadata":{"labels":{"kubernetes.io/hostname":"wrong","kubernetes.io/os":"plan9"}}}`)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, drift, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "label drift repaired", func() error {
		n, err := getNode(ctx, admin, name)
		if err != nil {
			return err
		}
		if n.Labels[corev1.LabelHostname] != name || n.Labels[corev1.LabelOSStable] != "linux" {
			return fmt.Errorf("labels %v", n.Labels)
		}
		return nil
	})

	// A Lease deleted by someone else is recreated.
	old, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "lease recreated", func() error {
		l, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.UID == old.UID {
			return fmt.Errorf("still the old lease")
		}
		return nil
	})

	// A deleted Node is registered again, with its labels and a fresh status.
	if err := admin.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node re-registered", func() error {
		n, err := getNode(ctx, admin, name)
		if err != nil {
			return err
		}
		if n.UID == node.UID {
			return fmt.Errorf("still the old node")
		}
		if n.Labels["node.kubernetes.io/pool"] != "blue" {
			return fmt.Errorf("labels %v", n.Labels)
		}
		if c := condition(n, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
			return fmt.Errorf("Ready = %+v", c)
		}
		return nil
	})

	// GetNode serves what the API server accepted.
	if got := r.getNode(""); got.Name != name || got.Status.NodeInfo.ContainerRuntimeVersion == "" {
		t.Fatalf("GetNode = %s %+v", got.Name, got.Status.NodeInfo)
	}
}

// TestAPIServerOutage stops kube-apiserver until the agent has failed to
// renew its Lease and to update its status (seen in its log). The agent must
// survive, renew the Lease and report status again afterwards, and never
// turn its own Node NotReady.
func TestAPIServerOutage(t *testing.T) {
	cp := controlplane.Get(t)
	ctx := context.Background()
	const name = "nsd-outage-1"
	admin := adminClient(t, cp)
	r := startRig(t, rigOpts{kubeconfig: cp.NodeKubeconfig(name), node: name, noCloud: true, mutate: func(c *Config) {
		c.NodeStatusReportFrequency = 15 * time.Second
	}})
	var before *corev1.Node
	eventually(t, "node Ready", func() error {
		n, err := getNode(ctx, admin, name)
		if err != nil {
			return err
		}
		if c := condition(n, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
			return fmt.Errorf("Ready = %+v", c)
		}
		before = n
		return nil
	})
	readySince := condition(before, corev1.NodeReady).LastTransitionTime

	// A loaded apiserver may outlast the harness's SIGTERM grace and be
	// SIGKILLed: that is a harder outage, and just as stopped.
	if err := cp.StopAPIServer(); err != nil && !strings.Contains(err.Error(), "was killed") {
		t.Fatal(err)
	} else if err != nil {
		t.Log(err)
	}
	eventually(t, "lease renewal and status updates failing", func() error {
		log := r.logs.String()
		if n := strings.Count(log, "failed to ensure lease exists"); n < 1 {
			return fmt.Errorf("%d failed lease renewals logged", n)
		}
		if n := strings.Count(log, "node status not updated"); n < 2 {
			return fmt.Errorf("%d failed status updates logged", n)
		}
		return nil
	})
	if err := cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()

	eventually(t, "lease renewed after the restart", func() error {
		l, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.RenewTime == nil || l.Spec.RenewTime.Time.Before(restarted.Add(-time.Second)) {
			return fmt.Errorf("renewTime %v, restarted %v", l.Spec.RenewTime, restarted)
		}
		return nil
	})
	// Ready is True after the outage with its original transition time:
	// a NotReady written at any moment in between would have moved it.
	eventually(t, "status reported after the restart", func() error {
		n, err := getNode(ctx, admin, name)
		if err != nil {
			return err
		}
		c := condition(n, corev1.NodeReady)
		if c == nil || c.LastHeartbeatTime.Time.Before(restarted.Add(-time.Second)) {
			return fmt.Errorf("Ready heartbeat %v, restarted %v", c, restarted)
		}
		if c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Equal(&readySince) {
			t.Fatalf("Ready flapped: %+v (ready since %v)", c, readySince)
		}
		return nil
	})
}

// TestFastStartupLoopReportsReady sets the periodic sync to an hour, so
// only the startup loop can report the runtime turning ready.
func TestFastStartupLoopReportsReady(t *testing.T) {
	cp := controlplane.Get(t)
	ctx := context.Background()
	const name = "nsd-fast-1"
	admin := adminClient(t, cp)
	r := startRig(t, rigOpts{kubeconfig: cp.NodeKubeconfig(name), node: name, noCloud: true, criNotReady: true, mutate: func(c *Config) {
		c.NodeStatusUpdateFrequency = time.Hour
		c.NodeStatusReportFrequency = time.Hour
	}})
	eventually(t, "node registered, not Ready", func() error {
		n, err := getNode(ctx, admin, name)
		if err != nil {
			return err
		}
		// No Ready condition yet (first sync still failing on a loaded
		// machine) is as good as False: only the startup loop can set True.
		if c := condition(n, corev1.NodeReady); c != nil && c.Status == corev1.ConditionTrue {
			return fmt.Errorf("Ready = %+v before the runtime is", c)
		}
		return nil
	})
	r.cri.setReady(true)
	eventually(t, "Ready reported by the startup loop", func() error {
		n, err := getNode(ctx, admin, name)
		if err != nil {
			return err
		}
		if c := condition(n, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
			return fmt.Errorf("Ready = %+v", c)
		}
		return nil
	})
}

// TestNodeCreatedWithDeclaredFeatures: the Node the API server first stores
// (the ADDED event of a watch opened before the agent starts) already
// carries status.declaredFeatures, as the kubelet's does, instead of
// gaining them with the first status patch.
func TestNodeCreatedWithDeclaredFeatures(t *testing.T) {
	cp := controlplane.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	const name = "nsd-created-1"
	admin := adminClient(t, cp)
	// A fresh API server's watch cache can answer "too large resource
	// version" at first: the retry watcher resumes from the listed version.
	sel := "metadata.name=" + name
	list, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("node %s exists before the agent starts", name)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return admin.CoreV1().Nodes().Watch(ctx, o)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	startRig(t, rigOpts{kubeconfig: cp.NodeKubeconfig(name), node: name, noCloud: true})
	var created *corev1.Node
	for created == nil {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed before the Node was created")
			}
			if ev.Type != watch.Added {
				t.Fatalf("first event %s (%v), want ADDED", ev.Type, ev.Object)
			}
			created = ev.Object.(*corev1.Node)
		case <-ctx.Done():
			t.Fatal("the Node was never created")
		}
	}
	want := setters.NodeFeatures(version.Kubernetes)
	if len(want) == 0 {
		t.Fatal("no declared features for this release: the test proves nothing")
	}
	if !slices.Equal(created.Status.DeclaredFeatures, want) {
		t.Fatalf("declaredFeatures at creation %v, want %v", created.Status.DeclaredFeatures, want)
	}
}
