package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
)

// pluginLBFile is the example plug-in's file for one Node and a pool of
// balancer addresses.
const pluginLBFile = `name: e2e
nodes:
  e2e-fail-node:
    provider_id: e2e://lab/e2e-fail-node
    addresses:
    - {type: InternalIP, address: 127.0.0.1}
load_balancer_pool: [198.51.100.50, 198.51.100.51, 198.51.100.52]
`

// event waits for an event with reason about the named Service.
func event(t *testing.T, cs kubernetes.Interface, service, reason string) {
	t.Helper()
	sel := fields.Set{"involvedObject.name": service, "reason": reason}.AsSelector().String()
	eventually(t, service+": event "+reason, func() error {
		l, err := cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return err
		}
		if len(l.Items) == 0 {
			return errors.New("none yet")
		}
		return nil
	})
}

// TestProviderFailureIsRetried drives LoadBalancers through the external
// plug-in example while it first returns errors and then is stopped and
// started again: the Service created meanwhile is served once the plug-in is
// back, the one deleted meanwhile keeps its finalizer until its balancer is
// really deleted and then goes, and nothing is left behind.
func TestProviderFailureIsRetried(t *testing.T) {
	cp := controlplane.Get(t)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	pool := netip.MustParsePrefix("198.51.100.48/28")
	dir := testenv.ShortDir(t, "csf")
	file := filepath.Join(dir, "cloud.yaml")
	sock := filepath.Join(dir, "cp.sock")
	writeFile(t, file, pluginLBFile)
	plugin := run(t, "plugin", bin(t, pluginPkg), "--socket", sock, "--config", file)
	createNode(t, admin, "e2e-fail-node", false, true)
	cloudsyncd(t, "cloudsyncd-fail", append(controllerArgs(rbacKubeconfig(t, cp), "e2e-fail", "service"),
		"--cloud-provider", "external", "--external-endpoint", "unix://"+sock)...)

	lbService(t, admin, "e2e-fail-a", 80, "198.51.100.200", 8080, "e2e-fail-node")
	ingress(t, admin, "e2e-fail-a", pool)

	// The plug-in answers every call with an error (its file no longer parses).
	writeFile(t, file, "nodes: [not, a, map\n")
	lbService(t, admin, "e2e-fail-b", 80, "198.51.100.200", 8080, "e2e-fail-node")
	if err := admin.CoreV1().Services("default").Delete(context.Background(), "e2e-fail-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	event(t, admin, "e2e-fail-b", "SyncLoadBalancerFailed")
	// The cleanup of a fails at its first provider call (does the balancer
	// exist?), which upstream reports as a failed sync too.
	event(t, admin, "e2e-fail-a", "SyncLoadBalancerFailed")
	a, err := admin.CoreV1().Services("default").Get(context.Background(), "e2e-fail-a", metav1.GetOptions{})
	if err != nil || !slices.Contains(a.Finalizers, lbFinalizer) {
		t.Fatalf("a Service whose balancer could not be deleted must keep its finalizer: %v %v", a, err)
	}
	b, err := admin.CoreV1().Services("default").Get(context.Background(), "e2e-fail-b", metav1.GetOptions{})
	if err != nil || !slices.Contains(b.Finalizers, lbFinalizer) || len(b.Status.LoadBalancer.Ingress) != 0 {
		t.Fatalf("the new Service must have the finalizer and no ingress yet: %v %v", b, err)
	}

	// Then the plug-in is down altogether, and comes back healthy.
	plugin.Stop(time.Minute)
	writeFile(t, file, pluginLBFile)
	run(t, "plugin-again", bin(t, pluginPkg), "--socket", sock, "--config", file)

	ingress(t, admin, "e2e-fail-b", pool)
	eventually(t, "e2e-fail-a deleted", func() error {
		s, err := admin.CoreV1().Services("default").Get(context.Background(), "e2e-fail-a", metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return fmt.Errorf("still there with finalizers %v", s.Finalizers)
	})
	deleted(t, admin, "e2e-fail-b")
}
