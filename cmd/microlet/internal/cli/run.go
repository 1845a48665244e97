package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/microlet/microlet/cmd/microlet/internal/supervisor"
	"github.com/microlet/microlet/internal/config"
	"github.com/microlet/microlet/internal/signals"
)

func newRunCmd(stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "run [--config FILE] [flags]",
		Short: "start every service as a child process and keep them running",
		Long: `run starts podconfig, cloudsyncd, runtime-shim, statusd, nodestatusd and
podsyncd in dependency order, restarts any that crash, and stops them in
reverse order on SIGTERM or SIGINT. Without --kubeconfig everything runs
standalone. Flags override the YAML file given with --config; run
'microlet run --help' for the full list.

--config also takes the kubelet's own KubeletConfiguration file
(kubelet.config.k8s.io/v1beta1, recognised by apiVersion and kind) with the
kubelet's flags (--kubeconfig, --bootstrap-kubeconfig, --node-ip,
--hostname-override, --node-labels, --register-with-taints,
--container-runtime-endpoint, ...): see docs/kubelet-config.md.`,
		// The flags come from the config struct, parsed by internal/config so
		// that flag beats file beats default exactly as in every service.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if isKubeletConfig(args) {
				return runKubelet(args, stdout, stderr)
			}
			cfg := supervisor.DefaultConfig()
			fs, configPath, err := config.FlagSet("microlet run", cfg)
			if err != nil {
				return err
			}
			fs.SetOutput(stderr)
			if err := config.Parse(fs, configPath, cfg, args); err != nil {
				if errors.Is(err, config.ErrHelp) {
					return nil
				}
				return badUsage(err)
			}
			return runSupervisor(cfg, nil, stdout, stderr)
		},
	}
}

// runKubelet is `microlet run` with a KubeletConfiguration file.
func runKubelet(args []string, stdout, stderr io.Writer) error {
	cfg, kc, unimplemented, err := kubeletConfig(args)
	if err != nil {
		return badUsage(err)
	}
	if err := writeConfigz(cfg, kc); err != nil {
		return failure("%v", err)
	}
	return runSupervisor(cfg, unimplemented, stdout, stderr)
}

// runSupervisor runs the supervisor with cfg until a signal; unimplemented
// are the KubeletConfiguration fields for the start-up warning.
func runSupervisor(cfg *supervisor.Config, unimplemented []string, stdout, stderr io.Writer) error {
	log, err := newLogger(cfg.LogLevel, cfg.LogFormat, stderr)
	if err != nil {
		return badUsage(err)
	}
	warnUnimplemented(log, unimplemented)
	s, err := supervisor.New(cfg, supervisor.WithLogger(log), supervisor.WithOutput(stdout, stderr))
	if err != nil {
		return err
	}
	ctx, cancel := signals.Context()
	defer cancel()
	if err := s.Run(ctx); err != nil {
		var ue *supervisor.UsageError
		if errors.As(err, &ue) {
			return badUsage(err)
		}
		return failure("%v", err)
	}
	return nil
}

// newLogger is service.NewLogger for any writer, so tests can capture the
// supervisor's log.
func newLogger(level, format string, w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log_level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler
	switch format {
	case "text", "":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("log_format %q: want text or json", format)
	}
	return slog.New(h).With("service", "microlet"), nil
}
