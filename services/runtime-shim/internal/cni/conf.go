package cni

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
)

// confExtensions are the file names the configuration directory is read for.
var confExtensions = []string{".conflist", ".conf", ".json"}

// network is one loaded configuration file.
type network struct {
	file string
	list *libcni.NetworkConfigList
}

// fileStamp identifies one version of a configuration file.
type fileStamp struct {
	name  string
	size  int64
	mtime time.Time
}

// loadDir returns the lexically first valid configuration of dir; the
// generated one (GeneratedFile) only when no other is valid.
func loadDir(dir string) (*network, error) {
	files, err := confFiles(dir)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no network config found in %s", dir)
	}
	sort.SliceStable(files, func(i, j int) bool {
		return filepath.Base(files[i]) != GeneratedFile && filepath.Base(files[j]) == GeneratedFile
	})
	var bad []string
	for _, f := range files {
		list, err := loadFile(f)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		return &network{file: f, list: list}, nil
	}
	return nil, fmt.Errorf("no valid network config in %s: %s", dir, strings.Join(bad, "; "))
}

// confFiles lists dir's candidate files in lexical order; a missing
// directory is an empty one.
func confFiles(dir string) ([]string, error) {
	files, err := libcni.ConfFiles(dir, confExtensions)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read network config dir: %w", err)
	}
	sort.Strings(files)
	return files, nil
}

// stamps describes dir's candidate files, to notice any change.
func stamps(dir string) []fileStamp {
	files, _ := confFiles(dir)
	out := make([]fileStamp, 0, len(files))
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			continue
		}
		out = append(out, fileStamp{name: f, size: st.Size(), mtime: st.ModTime()})
	}
	return out
}

func sameStamps(a, b []fileStamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].name != b[i].name || a[i].size != b[i].size || !a[i].mtime.Equal(b[i].mtime) {
			return false
		}
	}
	return true
}

// loadFile reads a configuration list, or a single plugin's configuration
// (a file without "plugins") as a list of one.
func loadFile(path string) (*libcni.NetworkConfigList, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	var list *libcni.NetworkConfigList
	if _, ok := probe["plugins"]; ok || filepath.Ext(path) == ".conflist" {
		if list, err = libcni.NetworkConfFromFile(path); err != nil {
			return nil, err
		}
	} else {
		// A single plugin's file (CNI before 1.0): the list of one
		// containerd and the kubelet made of it.
		one, err := libcni.NetworkPluginConfFromBytes(data)
		if err != nil {
			return nil, err
		}
		wrapped, err := json.Marshal(map[string]any{"cniVersion": one.Network.CNIVersion, "name": one.Network.Name,
			"plugins": []json.RawMessage{data}})
		if err != nil {
			return nil, err
		}
		if list, err = libcni.NetworkConfFromBytes(wrapped); err != nil {
			return nil, err
		}
	}
	if list.Name == "" {
		return nil, fmt.Errorf("network has no name")
	}
	if len(list.Plugins) == 0 {
		return nil, fmt.Errorf("network %q has no plugins", list.Name)
	}
	return list, nil
}

// checkPlugins makes sure every plugin of the list is in one of binDirs.
func checkPlugins(n *network, binDirs []string) error {
	for _, p := range n.list.Plugins {
		if _, err := invoke.FindInPath(p.Network.Type, binDirs); err != nil {
			return fmt.Errorf("network %q (%s): plugin %q not found in %s", n.list.Name, n.file, p.Network.Type, strings.Join(binDirs, ","))
		}
	}
	return nil
}
