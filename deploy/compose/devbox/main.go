package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/microlet/microlet/internal/testenv/controlplane"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "init":
		err = runInit(os.Args[2:])
	case "probe":
		err = runProbe(os.Args[2:])
	case "bootstrap":
		err = runBootstrap(os.Args[2:])
	case "cat":
		err = runCat(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "devbox %s: %v\n", os.Args[1], err)
		var u usageError
		if errors.As(err, &u) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ error }

func usage() {
	fmt.Fprintln(os.Stderr, "usage: devbox init --dir DIR --node NAME --server URL | probe URL [--ca F --cert F --key F] | bootstrap --kubeconfig F | cat FILE [--dir DIR]")
	os.Exit(2)
}

func runInit(args []string) error {
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	dir := fs.String("dir", "/creds", "directory to write the credentials to")
	node := fs.String("node", "", "node name the node credential is for")
	server := fs.String("server", "", "API server URL written into the kubeconfigs, e.g. https://127.0.0.1:16443")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *node == "" || *server == "" {
		return usageError{errors.New("--node and --server are required")}
	}
	if !strings.HasPrefix(*server, "https://") {
		return usageError{fmt.Errorf("--server %q: want an https:// URL", *server)}
	}
	return writeCredentials(*dir, *node, *server)
}

// probeTimeout bounds one probe: compose repeats the healthcheck anyway.
const probeTimeout = 5 * time.Second

func runProbe(args []string) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	ca := fs.String("ca", "", "CA certificate to verify an https URL with")
	cert := fs.String("cert", "", "client certificate")
	key := fs.String("key", "", "client key")
	// Accept the URL before or after the flags.
	var url string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		url, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if url == "" && fs.NArg() == 1 {
		url = fs.Arg(0)
	}
	if url == "" {
		return usageError{errors.New("a URL is required")}
	}
	tr := &http.Transport{}
	if strings.HasPrefix(url, "https://") {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if *ca != "" {
			pem, err := os.ReadFile(*ca)
			if err != nil {
				return err
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return fmt.Errorf("--ca %s: no certificate", *ca)
			}
		}
		if *cert != "" || *key != "" {
			kp, err := tls.LoadX509KeyPair(*cert, *key)
			if err != nil {
				return err
			}
			cfg.Certificates = []tls.Certificate{kp}
		}
		tr.TLSClientConfig = cfg
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return usageError{err}
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// runBootstrap creates, once the apiserver answers, what the test control
// plane's start creates beyond the apiserver's own objects
// (controlplane.Bootstrap): the default namespace's ServiceAccount and
// kube-root-ca.crt, which the controller manager would also make, so the
// node can run pods at once, the RBAC that lets nodes authorize the
// apiserver's kubelet client, and the one that lets the controller
// manager approve nodes' own client-certificate CSRs; and, for the node's
// kubeadm-join-style start, the bootstrap token from the credentials dir as
// a Secret valid for a day plus the RBAC that lets bootstrap tokens ask for
// node certificates (controlplane.EnsureNodeBootstrap). Errors are retried
// until --timeout: the apiserver's own bootstrap can lag /readyz.
func runBootstrap(args []string) error {
	fs := flag.NewFlagSet("bootstrap", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "/creds/admin.kubeconfig", "admin kubeconfig")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	tokenFile := fs.String("bootstrap-token-file", "/creds/"+bootstrapToken, "bootstrap token the node joins with (stored as a Secret, valid for a day from each start)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	token, err := os.ReadFile(*tokenFile)
	if err != nil {
		return fmt.Errorf("bootstrap token: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	for {
		err = controlplane.Bootstrap(ctx, cs, cfg.CAData)
		if err == nil {
			err = controlplane.EnsureNodeBootstrap(ctx, cs)
		}
		if err == nil {
			err = controlplane.EnsureBootstrapToken(ctx, cs, string(token), 24*time.Hour)
		}
		if err == nil {
			id, _, _ := strings.Cut(string(token), ".")
			fmt.Printf("devbox: bootstrap token %s.<secret> stored in kube-system; %s binds %s to %s, %s to %s\n",
				id, controlplane.NodeBootstrapBinding, controlplane.BootstrappersGroup, controlplane.NodeBootstrapperRole,
				controlplane.NodeBootstrapApprovalBinding, controlplane.NodeClientApprovalRole)
			fmt.Printf("devbox: default ServiceAccount and %s in place; %s binds group %s to %s; %s binds %s to %s\n",
				controlplane.RootCAConfigMap, controlplane.KubeletAPIAdminBinding, controlplane.KubeletClientGroup, controlplane.KubeletAPIAdminRole,
				controlplane.NodeCertRotationBinding, controlplane.NodesGroup, controlplane.NodeCertRotationRole)
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

func runCat(args []string) error {
	fs := flag.NewFlagSet("cat", flag.ContinueOnError)
	dir := fs.String("dir", "/creds", "credentials directory")
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if name == "" && fs.NArg() == 1 {
		name = fs.Arg(0)
	}
	if name == "" || strings.Contains(name, "/") {
		return usageError{errors.New("want one file name of the credentials dir, e.g. admin.kubeconfig")}
	}
	data, err := os.ReadFile(filepath.Join(*dir, name))
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(data)
	return err
}
