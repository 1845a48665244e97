package nodecreds

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/socket"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/node"
	"github.com/microlet/microlet/internal/testenv/registry"
	nodeapiv1 "github.com/microlet/microlet/proto/microlet/nodeapi/v1"
)

// leaseWatch records the node Lease's renewTime as the API server has it,
// once a second.
type leaseWatch struct {
	mu     sync.Mutex
	renews []time.Time // distinct renewTimes, in order
	errs   int
}

func (w *leaseWatch) run(ctx context.Context, cs kubernetes.Interface, name string) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		w.mu.Lock()
		switch {
		case err != nil:
			w.errs++
		case l.Spec.RenewTime != nil:
			rt := l.Spec.RenewTime.Time
			if n := len(w.renews); n == 0 || !rt.Equal(w.renews[n-1]) {
				w.renews = append(w.renews, rt)
			}
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// maxGap is the longest time between consecutive renewals, and between the
// last one and now.
func (w *leaseWatch) maxGap(now time.Time) (time.Duration, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var gap time.Duration
	for i := 1; i < len(w.renews); i++ {
		gap = max(gap, w.renews[i].Sub(w.renews[i-1]))
	}
	if n := len(w.renews); n > 0 {
		gap = max(gap, now.Sub(w.renews[n-1]))
	}
	return gap, len(w.renews)
}

func (w *leaseWatch) lastRenew() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.renews) == 0 {
		return time.Time{}
	}
	return w.renews[len(w.renews)-1]
}

// issued lists the node's signed client certificates by the time they were
// requested: who asked (the bootstrap token, then the node itself) and
// until when each is valid.
type issuedCert struct {
	requester string
	created   time.Time
	notAfter  time.Time
}

func issuedClientCerts(ctx context.Context, cs kubernetes.Interface, user string) ([]issuedCert, error) {
	list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{
		FieldSelector: "spec.signerName=" + certificatesv1.KubeAPIServerClientKubeletSignerName,
	})
	if err != nil {
		return nil, err
	}
	var out []issuedCert
	for _, c := range list.Items {
		if requestCN(c.Spec.Request) != user || len(c.Status.Certificate) == 0 {
			continue
		}
		leaf, err := parseCert(c.Status.Certificate)
		if err != nil {
			return nil, err
		}
		out = append(out, issuedCert{requester: c.Spec.Username, created: c.CreationTimestamp.Time, notAfter: leaf.NotAfter})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].created.Before(out[j].created) })
	return out, nil
}

// TestNodeJoinsAndRotates is the proof on a real control plane
// (bootstrap-token auth, the controller manager signing 3-minute
// certificates): `microlet run` with only a bootstrap kubeconfig joins,
// registers and goes Ready; its client certificate is renewed at least
// twice and the services keep working past the first certificate's expiry
// (the Lease renewed with no gap over 40 s, a crash-looping pod's restarts
// still reported); SIGKILL of the supervisor and a new start keep the node
// without a new bootstrap.
func TestNodeJoinsAndRotates(t *testing.T) {
	cp := controlPlane(t)
	cs := admin(t, cp)
	bins := node.Binaries(t)
	reg := registry.Start(t)
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, metav1.NamespaceDefault); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("/tmp", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	name := "join-" + rand.String(5)
	out := &testenv.LockedBuffer{}
	cfg := node.Config{
		Name: name, Dir: dir, Bins: bins,
		Kubeconfig:          filepath.Join(dir, "node.kubeconfig"),
		BootstrapKubeconfig: bootstrapKubeconfig(t, cp, dir),
		ClientCAFile:        filepath.Join(cp.PKI().Dir, "ca.crt"),
		Instance:            "e2e-" + rand.String(8),
		Args: map[string][]string{
			components.PodSyncd: {"--crashloop-backoff-initial=2s", "--crashloop-backoff-max=10s"},
			components.NodeAPI:  {"--rotate-server-certificates"},
		},
		Out: out,
	}
	var proc *node.Process
	t.Cleanup(func() {
		if proc != nil {
			proc.Stop(60 * time.Second)
		}
		if t.Failed() {
			o := out.String()
			if len(o) > 60000 {
				o = o[len(o)-60000:]
			}
			t.Logf("microlet output (tail):\n%s", o)
		}
		node.RemoveDockerObjects(cfg.Instance)
		_ = os.RemoveAll(dir)
	})
	// The cluster operator's part: approve the node's serving certificate
	// requests (the controller manager does not).
	approveCtx, stopApprover := context.WithCancel(ctx)
	defer stopApprover()
	go controlplane.ApproveKubeletServingCSRs(approveCtx, cs, time.Second)
	if proc, err = node.Launch(cfg); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := node.WaitReady(wctx, cs, name); err != nil {
		t.Fatal(err)
	}
	user := "system:node:" + name
	first, err := issuedClientCerts(ctx, cs, user)
	if err != nil || len(first) != 1 || !strings.HasPrefix(first[0].requester, "system:bootstrap:") {
		t.Fatalf("after joining: %+v, %v; want one certificate requested with the bootstrap token", first, err)
	}
	t.Logf("joined: certificate valid until %s", first[0].notAfter.Format(time.TimeOnly))

	// nodeapi serves a CA-signed certificate for the node's IP.
	var servedFirst *x509.Certificate
	testenv.Eventually(t, "nodeapi serves a kubelet-serving certificate", 2*time.Minute, func() error {
		c, err := servedCert(cfg.RunDir(), filepath.Join(cp.PKI().Dir, "ca.crt"))
		servedFirst = c
		return err
	})
	t.Logf("serving certificate valid until %s", servedFirst.NotAfter.Format(time.TimeOnly))

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	lw := &leaseWatch{}
	go lw.run(watchCtx, cs, name)

	// A pod that exits every few seconds: each restart is a status write
	// by statusd, with the node's credential.
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "crasher-" + rand.String(4), Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeName: name, RestartPolicy: corev1.RestartPolicyAlways, AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{
				Name: "main", Image: reg.Image(registry.Busybox), ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"/bin/sh", "-c", "sleep 3; exit 1"},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	restarts := func() int32 {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return -1
		}
		return p.Status.ContainerStatuses[0].RestartCount
	}

	// Two renewals by the node itself, and the first certificate expired.
	testenv.Eventually(t, "two renewals and the first certificate expired", 8*time.Minute, func() error {
		got, err := issuedClientCerts(ctx, cs, user)
		if err != nil {
			return err
		}
		if len(got) < 3 {
			return fmt.Errorf("%d certificates issued", len(got))
		}
		for _, c := range got[1:] {
			if c.requester != user {
				return fmt.Errorf("a renewal was requested by %s, not the node", c.requester)
			}
		}
		if time.Now().Before(first[0].notAfter.Add(20 * time.Second)) {
			return fmt.Errorf("first certificate valid until %s", first[0].notAfter.Format(time.TimeOnly))
		}
		return nil
	})
	// Still working with the renewed certificate: a Lease renewal and a
	// pod restart reported after the first certificate expired.
	before := restarts()
	testenv.Eventually(t, "Lease renewed and pod status written after the first certificate expired", time.Minute, func() error {
		if lr := lw.lastRenew(); !lr.After(first[0].notAfter) {
			return fmt.Errorf("last Lease renewal %s", lr.Format(time.TimeOnly))
		}
		if r := restarts(); r <= before || before < 0 {
			return fmt.Errorf("restart count %d, was %d", r, before)
		}
		return nil
	})
	// ... and the renewed serving certificate is served without a restart.
	testenv.Eventually(t, "nodeapi serves a renewed serving certificate", 2*time.Minute, func() error {
		c, err := servedCert(cfg.RunDir(), filepath.Join(cp.PKI().Dir, "ca.crt"))
		if err != nil {
			return err
		}
		if c.SerialNumber.Cmp(servedFirst.SerialNumber) == 0 {
			return fmt.Errorf("still the first serving certificate (valid until %s)", c.NotAfter.Format(time.TimeOnly))
		}
		return nil
	})
	certs, _ := issuedClientCerts(ctx, cs, user)
	for i, c := range certs {
		t.Logf("certificate %d: requested %s by %s, valid until %s", i, c.created.Format(time.TimeOnly), c.requester, c.notAfter.Format(time.TimeOnly))
	}

	// SIGKILL: the supervisor cannot stop anything in order; Pdeathsig
	// kills the services. A new start keeps the node and its credential.
	killed := time.Now()
	if err := syscall.Kill(proc.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-proc.Done()
	// Pdeathsig kills the services a moment later; a new supervisor
	// refuses sockets a live process still answers on, so wait for that
	// as a service manager's restart delay would.
	testenv.Eventually(t, "the killed supervisor's services gone", 30*time.Second, func() error {
		for _, c := range components.All {
			if p := components.SocketPath(cfg.RunDir(), c.Name); socket.Alive(p) {
				return fmt.Errorf("%s still answers", p)
			}
		}
		return nil
	})
	if proc, err = node.Launch(cfg); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer rcancel()
	if err := proc.WaitServing(rctx); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	testenv.Eventually(t, "Lease renewed after the restart", time.Minute, func() error {
		if lr := lw.lastRenew(); !lr.After(killed) {
			return fmt.Errorf("last renewal %s, killed at %s", lr.Format(time.TimeOnly), killed.Format(time.TimeOnly))
		}
		return nil
	})
	if err := node.WaitReady(rctx, cs, name); err != nil {
		t.Fatal(err)
	}
	after, err := issuedClientCerts(ctx, cs, user)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range after[1:] {
		if c.requester != user {
			t.Errorf("after the restart the node bootstrapped again (%s asked)", c.requester)
		}
	}
	stopWatch()
	gap, n := lw.maxGap(time.Now())
	t.Logf("Lease: %d renewals seen, longest gap %s; %d client certificates", n, gap.Round(time.Second), len(after))
	if gap > 40*time.Second {
		t.Errorf("the Lease went %s without a renewal (limit 40 s)", gap.Round(time.Second))
	}
}

// servedCert is the certificate nodeapi presents on its kubelet API port,
// verified against the cluster CA for 127.0.0.1 (the node's InternalIP).
func servedCert(runDir, caFile string) (*x509.Certificate, error) {
	cc, err := grpcclient.Dial(components.Endpoint(runDir, components.NodeAPI))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := nodeapiv1.NewNodeAPIServiceClient(cc).GetServingInfo(ctx, &nodeapiv1.GetServingInfoRequest{})
	if err != nil {
		return nil, err
	}
	if info.GetSelfSigned() {
		return nil, errors.New("nodeapi reports a self-signed certificate")
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(info.GetPort()))),
		&tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, fmt.Errorf("TLS to the kubelet API: %w", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}
