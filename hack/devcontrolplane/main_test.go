package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
)

// envRunMain makes the test binary behave as the command, so the test can
// run it as a real process and interrupt it like a person would.
const envRunMain = "DEVCONTROLPLANE_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func requireBinaries(t *testing.T) {
	t.Helper()
	for _, find := range []func() (string, error){controlplane.FindEtcd, controlplane.FindKubeAPIServer, controlplane.FindKubeScheduler, controlplane.FindKubeControllerManager} {
		if _, err := find(); err != nil {
			testenv.RequireOrSkip(t, "%v", err)
		}
	}
}

func clientFor(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func whoami(ctx context.Context, t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status.UserInfo.Username
}

// TestRunExportInterrupt runs the command as a person would: wait for the
// kubeconfigs it prints, use them, export one for another node, then Ctrl-C
// (SIGINT) and check it exits 0 with etcd, the apiserver, the scheduler and
// the controller manager gone.
func TestRunExportInterrupt(t *testing.T) {
	requireBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	base, err := os.MkdirTemp("/tmp", "mldcp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	state := filepath.Join(base, "state")

	cmd := exec.CommandContext(ctx, os.Args[0], "-dir", state, "-node", "dev-1,dev-2")
	cmd.Env = append(os.Environ(), envRunMain+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Whatever happens, do not leave the command running.
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	var printed strings.Builder
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		printed.WriteString(lines.Text() + "\n")
		if strings.HasPrefix(lines.Text(), "Ctrl-C stops it") {
			break
		}
	}
	if !strings.Contains(printed.String(), "Ctrl-C stops it") {
		t.Fatalf("command did not get ready; stdout:\n%s\nstderr:\n%s", printed.String(), stderr.String())
	}
	remaining := make(chan string, 1)
	go func() { b, _ := io.ReadAll(stdout); remaining <- string(b) }()

	adminPath := filepath.Join(state, "kubeconfig", "admin.kubeconfig")
	nodePath := filepath.Join(state, "kubeconfig", "node-dev-1.kubeconfig")
	for _, want := range []string{
		"kubectl --kubeconfig " + adminPath,
		"microlet run --kubeconfig " + nodePath + " --node-name dev-1",
		"node-dev-2.kubeconfig",
	} {
		if !strings.Contains(printed.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, printed.String())
		}
	}
	if !strings.Contains(printed.String(), "as "+controlplane.KubeletClientUser) {
		t.Errorf("output does not say how the apiserver reaches nodes:\n%s", printed.String())
	}
	for _, want := range []string{"as " + controlplane.SchedulerUser, "as " + controlplane.ControllerManagerUser} {
		if !strings.Contains(printed.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, printed.String())
		}
	}
	if kubectl, err := controlplane.FindKubectl(); err == nil && !strings.Contains(printed.String(), kubectl+" --kubeconfig "+adminPath) {
		t.Errorf("output does not name the built kubectl %s:\n%s", kubectl, printed.String())
	}
	admin := clientFor(t, adminPath)
	if got := whoami(ctx, t, admin); got != controlplane.AdminUser {
		t.Errorf("admin kubeconfig is %q", got)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Get(ctx, controlplane.KubeletAPIAdminBinding, metav1.GetOptions{}); err != nil {
		t.Errorf("kubelet API binding: %v", err)
	}
	// The controller manager runs: a new namespace gets its default
	// ServiceAccount without anyone creating it.
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dev-ns"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := admin.CoreV1().ServiceAccounts("dev-ns").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Errorf("no default ServiceAccount in a new namespace: %v", err)
	}
	node := clientFor(t, nodePath)
	if _, err := node.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dev-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("node kubeconfig cannot register its Node: %v", err)
	}

	// The static node token printed for dev-2 authenticates as that node.
	host := clientcmdServer(t, adminPath)
	m := regexp.MustCompile(`node dev-2 kubeconfig: \S+  \(static token: ([0-9a-f]+)\)`).FindStringSubmatch(printed.String())
	if m == nil {
		t.Fatalf("no static token for dev-2 in:\n%s", printed.String())
	}
	ca, err := os.ReadFile(filepath.Join(state, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	tokenClient, err := kubernetes.NewForConfig(&rest.Config{Host: host, BearerToken: m[1], TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
	if err != nil {
		t.Fatal(err)
	}
	if got := whoami(ctx, t, tokenClient); got != "system:node:dev-2" {
		t.Errorf("dev-2's token is %q", got)
	}

	// export, as the compose box would, against the running instance.
	exported := filepath.Join(base, "dev-3.kubeconfig")
	var out bytes.Buffer
	if err := export([]string{"-dir", state, "-server", host, "-node", "dev-3", "-out", exported}, &out); err != nil {
		t.Fatal(err)
	}
	if got := whoami(ctx, t, clientFor(t, exported)); got != "system:node:dev-3" {
		t.Errorf("exported kubeconfig is %q", got)
	}

	// serving-cert, against the running instance's CA.
	certPath, keyPath := filepath.Join(base, "node.crt"), filepath.Join(base, "node.key")
	if err := servingCert([]string{"-dir", state, "-node", "dev-1", "-hosts", "127.0.0.1,dev-1.example", "-cert", certPath, "-key", keyPath}, io.Discard); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	for _, h := range []string{"127.0.0.1", "dev-1", "dev-1.example"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: h}); err != nil {
			t.Errorf("serving-cert not valid for %s: %v", h, err)
		}
	}

	children := processesUsing(state)
	if len(children) != 4 {
		t.Errorf("want etcd, kube-apiserver, kube-scheduler and kube-controller-manager using %s, found pids %v", state, children)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after Ctrl-C: %v; stderr:\n%s", err, stderr.String())
	}
	if tail := <-remaining; !strings.Contains(tail, "stopping") {
		t.Errorf("no stop message after Ctrl-C: %q", tail)
	}
	testenv.Eventually(t, "every child gone after the command exited", 60*time.Second, func() error {
		if left := processesUsing(state); len(left) > 0 {
			return fmt.Errorf("processes %v still running", left)
		}
		return nil
	})
}

func clientcmdServer(t *testing.T, kubeconfig string) string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Host
}

func TestModeErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		mode string
		run  func([]string, io.Writer) error
		args []string
		want string
	}{
		{"export", export, []string{"-node", "n", "-out", "x"}, "-server"},
		{"export", export, []string{"-server", "https://h:1", "-out", "x"}, "-node"},
		{"export", export, []string{"-server", "https://h:1", "-node", "n"}, "-out"},
		{"export", export, []string{"-dir", dir, "-server", "https://h:1", "-node", "n", "-out", filepath.Join(dir, "k")}, "CA"},
		{"serving-cert", servingCert, []string{"-cert", "c", "-key", "k"}, "-node"},
		{"serving-cert", servingCert, []string{"-node", "n", "-key", "k"}, "-cert"},
		{"serving-cert", servingCert, []string{"-dir", dir, "-node", "n", "-cert", filepath.Join(dir, "c"), "-key", filepath.Join(dir, "k")}, "CA"},
	} {
		err := tc.run(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: got %v, want an error about %s", tc.mode, tc.args, err, tc.want)
		}
	}
}

// TestResetDir guards the one destructive thing the command does.
func TestResetDir(t *testing.T) {
	foreign := t.TempDir()
	if err := os.WriteFile(filepath.Join(foreign, "precious"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := resetDir(foreign); err == nil {
		t.Fatal("a foreign non-empty directory was accepted")
	}
	if _, err := os.Stat(filepath.Join(foreign, "precious")); err != nil {
		t.Fatalf("foreign file touched: %v", err)
	}

	ours := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ours, "pki"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"pki/ca.crt", "old.log"} {
		if err := os.WriteFile(filepath.Join(ours, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := resetDir(ours); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(ours); len(entries) != 0 {
		t.Fatalf("previous run's files left: %v", entries)
	}
	missing := filepath.Join(t.TempDir(), "new")
	if err := resetDir(missing); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(missing); err != nil || !st.IsDir() {
		t.Fatalf("missing dir not created: %v", err)
	}
}

// processesUsing lists live, non-zombie processes whose command line
// mentions dir (every control-plane process names its state dir in flags).
func processesUsing(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmdline, []byte(dir+"/")) {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		if i := strings.LastIndexByte(s, ')'); i > 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X') {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}
