package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/microlet/microlet/internal/nodecreds"
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/internal/signals"
	"github.com/microlet/microlet/internal/systemd"
)

// newCredentialsCmd is the node credential's owner where no supervisor
// runs (systemd units, compose): what `microlet run --bootstrap-kubeconfig`
// does in process, as a process of its own.
func newCredentialsCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		cfg                 nodecreds.Config
		check               bool
		logLevel, logFormat string
	)
	cmd := &cobra.Command{
		Use:   "credentials --kubeconfig FILE [--bootstrap-kubeconfig FILE] [flags]",
		Short: "own the node's API server credential: join with a bootstrap token, then renew the certificate",
		Long: `credentials makes sure --kubeconfig is usable: when it is missing or its client
certificate has expired, it requests one for system:node:<node-name> with the
bootstrap kubeconfig, stores the pair in --cert-dir and writes --kubeconfig
pointing at it. Then it keeps renewing the certificate until stopped; the
services re-read it. Under systemd it sends READY=1 once the kubeconfig is
usable. Run exactly one per node, and only where 'microlet run' is not used
(it does the same itself).

With --check it only reports whether --kubeconfig is usable (exit 0) or not
(exit 1), for healthchecks.`,
		Args: argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Kubeconfig == "" {
				return badUsage(errors.New("--kubeconfig is required: the node's kubeconfig (written when a bootstrap kubeconfig is given)"))
			}
			if check {
				if err := nodecreds.Check(cfg.Kubeconfig); err != nil {
					return failure("%v", err)
				}
				fmt.Fprintf(stdout, "%s: usable\n", cfg.Kubeconfig)
				return nil
			}
			if cfg.NodeName == "" {
				h, err := os.Hostname()
				if err != nil {
					return badUsage(fmt.Errorf("--node-name: %w", err))
				}
				cfg.NodeName = strings.ToLower(h)
			}
			log, err := newLogger(logLevel, logFormat, stderr)
			if err != nil {
				return badUsage(err)
			}
			cfg.Log = log.With("service", "credentials")
			ctx, cancel := signals.Context()
			defer cancel()
			n := systemd.NewNotifier(cfg.Log, nil)
			err = nodecreds.Run(ctx, cfg, n.Ready)
			n.Stopping()
			if err != nil {
				return failure("node credentials: %v", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "the node's kubeconfig (written when a bootstrap kubeconfig is given)")
	f.StringVar(&cfg.BootstrapKubeconfig, "bootstrap-kubeconfig", "", "kubeconfig with a bootstrap credential (a bootstrap token) to request the node's client certificate with")
	f.StringVar(&cfg.NodeName, "node-name", "", "name of this node (default: the hostname, lower-cased)")
	f.StringVar(&cfg.CertDir, "cert-dir", service.DefaultDataDir+"/pki", "directory of the client certificate pairs (kubelet-client-*.pem)")
	f.DurationVar(&cfg.WaitTimeout, "bootstrap-timeout", 15*time.Minute, "how long to wait for the first certificate to be approved and signed")
	f.BoolVar(&check, "check", false, "only report whether --kubeconfig is usable now")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	return cmd
}
