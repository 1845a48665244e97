// Command devcontrolplane runs the test control plane (etcd, and the
// kube-apiserver, kube-scheduler and kube-controller-manager built by
// hack/build-k8s.sh) in the foreground for people: point kubectl and
// `microlet run --kubeconfig` at it.
//
//	devcontrolplane [run] [-dir D] [-node N] [-port P] [-bind-address A] [-san S,...] [-verify-kubelet-certs] [-scheduler=false] [-controller-manager=false]
//	devcontrolplane export -dir D -server URL -node N -out FILE
//	devcontrolplane serving-cert -dir D -node N -hosts H,... -cert FILE -key FILE
//
// run (the default) starts etcd, the apiserver, the scheduler and the
// controller manager with their state in D, writes the admin and node
// kubeconfigs there, prints them with usage hints
// (kubectl: the one hack/build-kubectl.sh caches, when built) and stops
// everything on Ctrl-C. The apiserver reaches nodes' kubelet API (nodeapi)
// as a client of its own (controlplane.KubeletClientFlags). export signs a
// node credential with the CA of a control plane running from D and writes
// a kubeconfig for it that uses another server address, e.g. the one
// containers see. serving-cert signs a kubelet serving certificate with
// that CA, which a control plane run with -verify-kubelet-certs trusts.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/microlet/microlet/internal/signals"
	"github.com/microlet/microlet/internal/testenv/controlplane"
)

const defaultDir = "/tmp/microlet-devcp"

func main() {
	args := os.Args[1:]
	mode := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		mode, args = args[0], args[1:]
	}
	var err error
	switch mode {
	case "run":
		err = run(args, os.Stdout)
	case "export":
		err = export(args, os.Stdout)
	case "serving-cert":
		err = servingCert(args, os.Stdout)
	default:
		err = fmt.Errorf("unknown mode %q (want run, export or serving-cert)", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "devcontrolplane:", err)
		os.Exit(2)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	dir := fs.String("dir", defaultDir, "state directory (pki, etcd data, logs, kubeconfigs); wiped at start")
	node := fs.String("node", hostname(), "node name(s), comma-separated, to write kubeconfigs for (certificate and static token)")
	port := fs.Int("port", 0, "apiserver port (0 picks a free one)")
	bind := fs.String("bind-address", "127.0.0.1", "apiserver bind address (0.0.0.0 lets containers reach it)")
	sans := fs.String("san", "", "extra host names or IPs, comma-separated, for the serving certificate")
	verify := fs.Bool("verify-kubelet-certs", false, "check nodes' serving certificates against the CA (--kubelet-certificate-authority); sign them with the serving-cert mode")
	scheduler := fs.Bool("scheduler", true, "run kube-scheduler (pods without spec.nodeName are placed on Ready nodes)")
	controllerManager := fs.Bool("controller-manager", true, "run kube-controller-manager (Deployments, ServiceAccounts, garbage collection, CSR signing, ...)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	nodes := splitList(*node)
	if len(nodes) == 0 {
		return errors.New("-node: at least one node name is needed")
	}
	if err := resetDir(*dir); err != nil {
		return err
	}

	ctx, stop := signals.Context()
	defer stop()
	opts := controlplane.Options{
		Dir: *dir, BindAddress: *bind, APIServerPort: *port,
		ExtraSANs: splitList(*sans), NodeTokens: nodes,
		VerifyKubeletServingCerts: *verify,
		Scheduler:                 *scheduler, ControllerManager: *controllerManager,
	}
	fmt.Fprintf(out, "starting %s in %s ...\n", strings.Join(processNames(opts), ", "), *dir)
	cp, err := controlplane.Start(ctx, opts)
	if errors.Is(err, controlplane.ErrMissingBinary) && (*scheduler || *controllerManager) {
		return fmt.Errorf("%w\nbuild them with make test-deps, or run without: -scheduler=false -controller-manager=false", err)
	}
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "stopping ...")
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "devcontrolplane: stop:", err)
		}
	}()

	admin := cp.AdminKubeconfig()
	fmt.Fprintf(out, "\ncontrol plane ready at %s (logs in %s)\n\n", cp.Host(), filepath.Join(*dir, "logs"))
	fmt.Fprintf(out, "admin kubeconfig:  %s\n", admin)
	for _, n := range nodes {
		tok, _ := cp.NodeToken(n)
		fmt.Fprintf(out, "node %s kubeconfig: %s  (static token: %s)\n", n, cp.NodeKubeconfig(n), tok)
	}
	kubectl, kubectlErr := controlplane.FindKubectl()
	if kubectlErr != nil {
		kubectl = "kubectl"
		fmt.Fprintf(out, "kubectl:           not built (%v); hack/build-kubectl.sh builds the control plane's release\n", kubectlErr)
	} else {
		fmt.Fprintf(out, "kubectl:           %s\n", kubectl)
	}
	verified := "self-signed serving certificates accepted"
	if *verify {
		verified = "serving certificates checked against " + filepath.Join(*dir, "pki", "ca.crt")
	}
	fmt.Fprintf(out, "kubelet API:       the apiserver dials nodes at %s as %s (group %s, bound to %s); %s\n",
		controlplane.KubeletPreferredAddressTypes, controlplane.KubeletClientUser, controlplane.KubeletClientGroup, controlplane.KubeletAPIAdminRole, verified)
	if pid := cp.SchedulerPID(); pid != 0 {
		fmt.Fprintf(out, "scheduler:         %s pid %d as %s\n", controlplane.KubeScheduler, pid, controlplane.SchedulerUser)
	} else {
		fmt.Fprintln(out, "scheduler:         none (-scheduler=false): give pods spec.nodeName yourself")
	}
	if pid := cp.ControllerManagerPID(); pid != 0 {
		fmt.Fprintf(out, "controller manager: %s pid %d as %s (controllers %s; CSRs signed by the CA)\n",
			controlplane.KubeControllerManager, pid, controlplane.ControllerManagerUser, controlplane.ControllerManagerControllers)
	} else {
		fmt.Fprintln(out, "controller manager: none (-controller-manager=false): no Deployments, no ServiceAccounts in new namespaces")
	}
	fmt.Fprintf(out, "\n  %s --kubeconfig %s get nodes\n", kubectl, admin)
	for _, n := range nodes {
		fmt.Fprintf(out, "  microlet run --kubeconfig %s --node-name %s --client-ca-file %s\n", cp.NodeKubeconfig(n), n, filepath.Join(*dir, "pki", "ca.crt"))
	}
	fmt.Fprintf(out, "\nexport a node kubeconfig for another address:\n  go run ./hack/devcontrolplane export -dir %s -server https://<host>:<port> -node <name> -out <file>\n", *dir)
	fmt.Fprintln(out, "\nCtrl-C stops it.")
	<-ctx.Done()
	return nil
}

func export(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	dir := fs.String("dir", defaultDir, "state directory of a running `devcontrolplane run`")
	server := fs.String("server", "", "apiserver URL as the node will reach it, e.g. https://controlplane:6443 (must be in the serving certificate: run with -san)")
	node := fs.String("node", "", "node name")
	outPath := fs.String("out", "", "kubeconfig file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *server == "":
		return errors.New("-server is required")
	case *node == "":
		return errors.New("-node is required")
	case *outPath == "":
		return errors.New("-out is required")
	}
	pki, err := controlplane.LoadPKI(filepath.Join(*dir, "pki"))
	if err != nil {
		return fmt.Errorf("-dir %s: no running dev control plane's CA: %w", *dir, err)
	}
	if err := pki.WriteNodeKubeconfig(*outPath, *server, *node); err != nil {
		return err
	}
	fmt.Fprintln(out, *outPath)
	return nil
}

func servingCert(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("serving-cert", flag.ContinueOnError)
	dir := fs.String("dir", defaultDir, "state directory of a running `devcontrolplane run`")
	node := fs.String("node", "", "node name (the certificate is valid for it too)")
	hosts := fs.String("hosts", "127.0.0.1", "IP addresses and DNS names, comma-separated, the apiserver dials the node at")
	certPath := fs.String("cert", "", "certificate file to write")
	keyPath := fs.String("key", "", "key file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *node == "":
		return errors.New("-node is required")
	case *certPath == "" || *keyPath == "":
		return errors.New("-cert and -key are required")
	}
	pki, err := controlplane.LoadPKI(filepath.Join(*dir, "pki"))
	if err != nil {
		return fmt.Errorf("-dir %s: no running dev control plane's CA: %w", *dir, err)
	}
	certPEM, keyPEM, err := pki.KubeletServingCert(*node, splitList(*hosts)...)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(*certPath, certPEM, 0o644); err != nil {
		return err
	}
	fmt.Fprintln(out, *certPath, *keyPath)
	return nil
}

// processNames lists what Start runs with opts, in start order.
func processNames(opts controlplane.Options) []string {
	names := []string{"etcd", "kube-apiserver"}
	if opts.Scheduler {
		names = append(names, controlplane.KubeScheduler)
	}
	if opts.ControllerManager {
		names = append(names, controlplane.KubeControllerManager)
	}
	return names
}

// resetDir empties dir for a fresh cluster, but only if it is ours (it
// holds a previous run's pki/ca.crt) or empty: a mistyped -dir must never
// wipe someone's files.
func resetDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return os.MkdirAll(dir, 0o700)
	case err != nil:
		return err
	case len(entries) == 0:
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "pki", "ca.crt")); err != nil {
		return fmt.Errorf("-dir %s is not empty and not a previous dev control plane; refusing to wipe it", dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.MkdirAll(dir, 0o700)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// hostname is the default node name, the same default a kubelet uses.
func hostname() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return strings.ToLower(h)
	}
	return "dev-node"
}
