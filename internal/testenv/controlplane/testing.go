package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/microlet/microlet/internal/testenv"
)

// pkg is the one control plane of the running test binary.
var pkg struct {
	mu      sync.Mutex
	inMain  bool
	started bool
	cp      *ControlPlane
	err     error
	// full is set once GetFull tried to add the scheduler and the
	// controller manager; fullErr is how that went.
	full    bool
	fullErr error
}

// Main runs the package's tests and then stops the control plane, if a
// test started one, by PID. Use it as os.Exit(controlplane.Main(m)) in
// TestMain. A test that panics never returns here; Pdeathsig on the
// children covers that case.
func Main(m *testing.M) int {
	pkg.mu.Lock()
	pkg.inMain = true
	pkg.mu.Unlock()
	code := m.Run()
	testenv.RemoveBuilt()
	pkg.mu.Lock()
	cp := pkg.cp
	pkg.mu.Unlock()
	if cp != nil {
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "controlplane: stop: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// Get returns the package's control plane, starting it on first use. A
// missing etcd or kube-apiserver skips the test, or fails it when
// MICROLET_REQUIRE_CONTROLPLANE=1. Any other start error fails every test
// that asks, without retrying the slow start each time.
func Get(t testing.TB) *ControlPlane {
	t.Helper()
	pkg.mu.Lock()
	defer pkg.mu.Unlock()
	if !pkg.inMain {
		t.Fatal("controlplane.Get: the package's TestMain must call os.Exit(controlplane.Main(m)), which stops the control plane")
	}
	if !pkg.started {
		pkg.started = true
		pkg.cp, pkg.err = Start(context.Background(), Options{})
	}
	if pkg.err != nil {
		if errors.Is(pkg.err, ErrMissingBinary) {
			testenv.RequireOrSkip(t, "no control plane: %v (make test-deps)", pkg.err)
		}
		t.Fatalf("control plane: %v\n(install etcd and build kube-apiserver with: make test-deps)", pkg.err)
	}
	return pkg.cp
}

// GetFull is Get with kube-scheduler and kube-controller-manager running
// too, a cluster's control plane: Deployments get ReplicaSets and pods
// placed on Ready nodes, namespaces their default ServiceAccount and
// kube-root-ca.crt, CSRs are approved and signed, garbage is collected.
// e2e suites that run workloads on a real node use it.
//
// There is still one control plane per test binary: the first GetFull
// adds the two components to the one Get starts, and from then on Get
// returns it with them. Keep tests that need no controllers in packages
// that never call GetFull; the controllers act on everything (the pod
// garbage collector, for one, deletes pods bound to a node that does not
// exist). A missing binary skips or fails as in Get.
func GetFull(t testing.TB) *ControlPlane {
	t.Helper()
	cp := Get(t)
	pkg.mu.Lock()
	defer pkg.mu.Unlock()
	if !pkg.full {
		pkg.full = true
		pkg.fullErr = missingComponentBinaries([]string{KubeScheduler, KubeControllerManager})
	}
	if pkg.fullErr == nil {
		// A no-op while both run; restarts one a test stopped. A failed
		// start is not retried: it is slow and would fail every test alike.
		pkg.fullErr = cp.startComponents(context.Background(), []string{KubeScheduler, KubeControllerManager})
	}
	if pkg.fullErr != nil {
		if errors.Is(pkg.fullErr, ErrMissingBinary) {
			testenv.RequireOrSkip(t, "no scheduler or controller manager: %v (make test-deps)", pkg.fullErr)
		}
		t.Fatalf("scheduler and controller manager: %v\n(build them with: make test-deps)", pkg.fullErr)
	}
	return cp
}

// Kubectl returns the kubectl binary (FindKubectl). Like Get, it skips the
// test when the binary is missing, or fails it when
// MICROLET_REQUIRE_CONTROLPLANE=1; build it with make test-deps or
// hack/build-kubectl.sh. Run it with ControlPlane.KubectlCommand.
func Kubectl(t testing.TB) string {
	t.Helper()
	p, err := FindKubectl()
	if err != nil {
		if errors.Is(err, ErrMissingBinary) {
			testenv.RequireOrSkip(t, "no kubectl: %v (make test-deps)", err)
		}
		t.Fatalf("kubectl: %v\n(build it with: make test-deps)", err)
	}
	return p
}
