package cli

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/microlet/microlet/cmd/microlet/internal/supervisor"
	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/config"
	"github.com/microlet/microlet/internal/kubeletconfig"
)

// configArg returns the value of --config in args, "" without one.
func configArg(args []string) string { return flagArg(args, "config") }

// flagArg returns the value of --name in args, "" without one.
func flagArg(args []string, name string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// isKubeletConfig reports whether the --config file in args is a
// KubeletConfiguration rather than microlet's own file.
func isKubeletConfig(args []string) bool {
	p := configArg(args)
	if p == "" {
		return false
	}
	data, err := os.ReadFile(p)
	return err == nil && kubeletconfig.Is(data)
}

// kubeletConfig is `microlet run --config <KubeletConfiguration>`: the
// file is decoded, the kubelet's flags (and microlet's own run flags whose
// names the kubelet does not use) override it, the kubelet's defaulting and
// validation run, and the result becomes the supervisor's configuration and
// each service's arguments. It returns the configuration, the effective
// KubeletConfiguration and the set fields microlet does not implement.
func kubeletConfig(args []string) (*supervisor.Config, *kubeletv1beta1.KubeletConfiguration, []string, error) {
	path := configArg(args)
	kc, err := kubeletconfig.LoadUndefaulted(path)
	if err != nil {
		return nil, nil, nil, err
	}
	cfg := supervisor.DefaultConfig()
	// microlet's own file, for what a KubeletConfiguration cannot say
	// (bin_dir, per-service args and env, ...), under both the
	// KubeletConfiguration and the flags.
	own := flagArg(args, "microlet-config")
	if own != "" {
		if err := config.LoadFile(own, cfg); err != nil {
			return nil, nil, nil, err
		}
	}
	fs := pflag.NewFlagSet("microlet run", pflag.ContinueOnError)
	fs.SortFlags = true
	fs.String("config", path, "KubeletConfiguration file (kubelet.config.k8s.io/v1beta1) or microlet's own YAML")
	fs.String("microlet-config", own, "with a KubeletConfiguration: microlet's own YAML file for what the KubeletConfiguration has no field for (bin_dir, args, env); the KubeletConfiguration and the flags override it")
	var kf kubeletconfig.Flags
	kubeletconfig.AddFlags(fs, &kf, kc)
	ownFS, _, err := config.FlagSet("microlet run", cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	// microlet's own run flags that the kubelet has no flag of that name.
	ownFS.VisitAll(func(f *pflag.Flag) {
		if fs.Lookup(f.Name) == nil {
			fs.AddFlag(f)
		}
	})
	if err := kubeletconfig.CheckArgs(fs, args); err != nil {
		return nil, nil, nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, nil, nil, err
	}
	if fs.NArg() > 0 {
		return nil, nil, nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := kc.DeepCopy()
	kubeletconfig.SetDefaults(kc)
	if err := kubeletconfig.Validate(kc); err != nil {
		return nil, nil, nil, fmt.Errorf("failed to validate kubelet configuration, error: %w, path: %s", err, path)
	}
	tr := kubeletconfig.Translate(kc, set)
	for _, a := range tr.Supervisor {
		name, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if fs.Changed(name) {
			continue // microlet's own flag given on the command line wins
		}
		if err := fs.Set(name, v); err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", a, err)
		}
	}
	if kf.Kubeconfig != "" {
		cfg.Kubeconfig = kf.Kubeconfig
	}
	if kf.BootstrapKubeconfig != "" {
		cfg.BootstrapKubeconfig = kf.BootstrapKubeconfig
	}
	if kf.CertDir != "" {
		cfg.CertDir = kf.CertDir
	}
	if kf.RootDir != "" && !fs.Changed("data-dir") {
		cfg.DataDir = kf.RootDir
	}
	if kf.Verbosity >= 4 && !fs.Changed("log-level") {
		cfg.LogLevel = "debug"
	}
	cfg.KubeletPort = int(kc.Port)
	var ns []string
	if kf.HostnameOverride != "" {
		// As the kubelet: the override, lower-cased and trimmed, names the node.
		name := strings.ToLower(strings.TrimSpace(kf.HostnameOverride))
		if !fs.Changed("node-name") {
			cfg.NodeName = name
		}
		ns = append(ns, "--hostname-override="+name)
	}
	if kf.NodeIP != "" {
		ns = append(ns, "--node-ip="+kf.NodeIP)
	}
	if len(kf.NodeLabels) > 0 {
		ns = append(ns, "--node-labels="+joinMap(kf.NodeLabels))
	}
	if kf.CloudProvider != "" {
		ns = append(ns, "--cloud-provider="+kf.CloudProvider)
	}
	tr.Args[kubeletconfig.NodeStatusd] = append(tr.Args[kubeletconfig.NodeStatusd], ns...)
	if cfg.Args == nil {
		cfg.Args = map[string][]string{}
	}
	for svc, a := range tr.Args {
		// The file's and kubelet flags' arguments first, so microlet's own
		// args entries (appended after) still win.
		cfg.Args[svc] = append(a, cfg.Args[svc]...)
	}
	return cfg, kc, tr.Unimplemented, nil
}

// writeConfigz writes the effective configuration for nodeapi's /configz and
// passes its path on.
func writeConfigz(cfg *supervisor.Config, kc *kubeletv1beta1.KubeletConfiguration) error {
	kc.APIVersion = kubeletv1beta1.SchemeGroupVersion.String()
	kc.Kind = kubeletconfig.Kind
	data, err := json.Marshal(kc)
	if err != nil {
		return err
	}
	dir := supervisor.DataDir(cfg.DataDir, components.NodeAPI)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("configz: %w", err)
	}
	p := filepath.Join(dir, "kubelet-config.json")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		return fmt.Errorf("configz: %w", err)
	}
	cfg.Args[components.NodeAPI] = append([]string{"--configz-file=" + p}, cfg.Args[components.NodeAPI]...)
	return nil
}

// warnUnimplemented logs the one start-up line naming every set field
// microlet does not implement.
func warnUnimplemented(log *slog.Logger, fields []string) {
	if len(fields) == 0 {
		return
	}
	log.Warn("KubeletConfiguration fields set to non-default values that microlet does not implement (no effect; see docs/kubelet-config.md)",
		"fields", strings.Join(fields, ","))
}

func joinMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}
