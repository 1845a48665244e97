package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
)

// leads reports whether the process has logged taking the Lease.
func leads(p *proc) bool { return strings.Contains(p.Out.String(), "became leader") }

// TestLeaderElectionHandsOverWhenTheLeaderDies runs two cloudsyncd replicas
// on one Lease: only one acts; when it is killed (no chance to release the
// Lease) the other takes the Lease once it expires and serves both the old
// Service and a new one.
func TestLeaderElectionHandsOverWhenTheLeaderDies(t *testing.T) {
	cp := controlplane.Get(t)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	pool := netip.MustParsePrefix("127.0.78.0/28")
	createNode(t, admin, "e2e-le-node", false, true)
	ip := testenv.HostIP(t)
	port := backend(t, ip, "leader test backend")
	args := append(controllerArgs(rbacKubeconfig(t, cp), "e2e-le", "service"),
		"--cloud-provider", "local", "--local-lb-pool", pool.String())
	a := cloudsyncd(t, "cloudsyncd-a", args...)
	b := cloudsyncd(t, "cloudsyncd-b", args...)

	var leader, standby *proc
	eventually(t, "one replica leads", func() error {
		switch {
		case leads(a) && leads(b):
			return errors.New("both replicas say they lead")
		case leads(a):
			leader, standby = a, b
		case leads(b):
			leader, standby = b, a
		default:
			return errors.New("no leader yet")
		}
		return nil
	})
	holder := func() string {
		l, err := admin.CoordinationV1().Leases("kube-system").Get(context.Background(), "e2e-le", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	first := holder()
	if first == "" {
		t.Fatal("the Lease has no holder")
	}

	lbService(t, admin, "e2e-le-1", 18090, ip, port, "e2e-le-node")
	ip1 := ingress(t, admin, "e2e-le-1", pool)
	reaches(t, ip1, 18090, "leader test backend")
	if leads(standby) {
		t.Fatalf("the standby %s took the Lease while the leader lived", standby.Name)
	}

	t.Logf("killing the leader %s (%s)", leader.Name, first)
	leader.Kill()
	eventually(t, "the standby takes the Lease", func() error {
		if h := holder(); h == "" || h == first || !leads(standby) {
			return fmt.Errorf("holder %q, standby leads: %v", h, leads(standby))
		}
		return nil
	})
	lbService(t, admin, "e2e-le-2", 18091, ip, port, "e2e-le-node")
	ip2 := ingress(t, admin, "e2e-le-2", pool)
	reaches(t, ip2, 18091, "leader test backend")
	// Nothing was lost: the new leader serves the first Service as well
	// (the killed leader's listeners died with it).
	reaches(t, ingress(t, admin, "e2e-le-1", pool), 18090, "leader test backend")
	deleted(t, admin, "e2e-le-1")
	deleted(t, admin, "e2e-le-2")
}
