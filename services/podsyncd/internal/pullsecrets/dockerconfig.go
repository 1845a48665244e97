package pullsecrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// DockerConfigLifetime is how long the node's docker config is cached
// before the files are read again (the kubelet's 5 minutes).
const DockerConfigLifetime = 5 * time.Minute

// DockerConfigFiles are the node's own registry credentials from docker
// config files, the kubelet's default keyring (pkg/credentialprovider):
// the first config.json that parses in the preferred directory (the
// kubelet's root directory; podsyncd's data dir), the working directory,
// ~/.docker and /.docker; when none does, the first legacy .dockercfg in
// the preferred directory, the working directory, ~ and /. Every pod on
// the node may use them. They are read at most every Lifetime.
type DockerConfigFiles struct {
	// JSONDirs and CfgDirs are the directories searched for config.json
	// and .dockercfg, in order.
	JSONDirs, CfgDirs []string
	Lifetime          time.Duration
	Clock             clock.Clock
	Log               *slog.Logger

	mu      sync.Mutex
	cfg     map[string]Entry
	expires time.Time
}

// NewDockerConfigFiles searches the kubelet's default places with
// preferred first.
func NewDockerConfigFiles(preferred string, log *slog.Logger) *DockerConfigFiles {
	home, _ := os.UserHomeDir()
	// The kubelet's working directory is "" made absolute: the process's.
	wd, _ := os.Getwd()
	if log == nil {
		log = slog.Default()
	}
	return &DockerConfigFiles{
		JSONDirs: []string{preferred, wd, filepath.Join(home, ".docker"), "/.docker"},
		CfgDirs:  []string{preferred, wd, home, "/"},
		Lifetime: DockerConfigLifetime,
		Clock:    clock.RealClock{},
		Log:      log,
	}
}

// Provide returns the node's docker config entries (the image does not
// matter: the keyring matches them).
func (d *DockerConfigFiles) Provide(_ context.Context, _ string) map[string]Entry {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.Clock.Now()
	if d.cfg != nil && now.Before(d.expires) {
		return d.cfg
	}
	cfg, path, err := d.read()
	switch {
	case err != nil:
		d.Log.Debug("no node docker config", "err", err)
		cfg = map[string]Entry{}
	default:
		d.Log.Debug("node docker config read", "file", path, "registries", len(cfg))
	}
	d.cfg, d.expires = cfg, now.Add(d.Lifetime)
	return cfg
}

// read finds the first usable file; files that do not parse are skipped
// (logged), as the kubelet skips them.
func (d *DockerConfigFiles) read() (map[string]Entry, string, error) {
	try := func(dirs []string, name string, parse func([]byte) (map[string]Entry, error)) (map[string]Entry, string, bool) {
		for _, dir := range dirs {
			path, err := filepath.Abs(filepath.Join(dir, name))
			if err != nil {
				continue
			}
			b, err := os.ReadFile(path)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err == nil {
				var cfg map[string]Entry
				if cfg, err = parse(b); err == nil {
					return cfg, path, true
				}
			}
			d.Log.Warn("node docker config skipped", "file", path, "err", err)
		}
		return nil, "", false
	}
	if cfg, path, ok := try(d.JSONDirs, "config.json", ParseDockerConfigJSON); ok {
		return cfg, path, nil
	}
	if cfg, path, ok := try(d.CfgDirs, ".dockercfg", ParseDockercfg); ok {
		return cfg, path, nil
	}
	return nil, "", fmt.Errorf("no valid config.json in %v nor .dockercfg in %v", d.JSONDirs, d.CfgDirs)
}

// ParseDockerConfigJSON reads a config.json ({"auths": {registry: entry}}).
func ParseDockerConfigJSON(b []byte) (map[string]Entry, error) {
	var cfg struct {
		Auths map[string]Entry `json:"auths"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, err
	}
	if cfg.Auths == nil {
		cfg.Auths = map[string]Entry{}
	}
	return cfg.Auths, nil
}

// ParseDockercfg reads a legacy .dockercfg ({registry: entry}).
func ParseDockercfg(b []byte) (map[string]Entry, error) {
	var cfg map[string]Entry
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}
