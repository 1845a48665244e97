package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"

	"github.com/microlet/microlet/services/runtime-shim/internal/checkpoint"

	"github.com/microlet/microlet/internal/statefile"
)

// record is what the shim keeps of one sandbox's attachment: written
// before ADD (so a crash during ADD still leaves something to DEL) and
// completed with the pod IPs after it.
type record struct {
	SandboxID string `json:"sandbox_id"`
	// NetNS is the pinned namespace.
	NetNS  string `json:"netns"`
	IfName string `json:"ifname"`
	// Network, CNIVersion and Plugins are the configuration ADD ran with,
	// so DEL runs the same plugins whatever the directory holds by then.
	Network    string            `json:"network"`
	CNIVersion string            `json:"cni_version"`
	Plugins    []json.RawMessage `json:"plugins"`
	File       string            `json:"file"`
	// DisableCheck is the list's disableCheck: CHECK is not to be run.
	DisableCheck bool `json:"disable_check,omitempty"`
	// Args and CapabilityArgs are the CNI_ARGS and runtimeConfig of ADD.
	Args           [][2]string    `json:"args"`
	CapabilityArgs map[string]any `json:"capability_args,omitempty"`
	// Added is set once ADD succeeded; IPs are the pod's addresses from its
	// result, IPv4 first.
	Added bool     `json:"added"`
	IPs   []string `json:"ips,omitempty"`
}

func (r *record) list() (*libcni.NetworkConfigList, error) {
	l := &libcni.NetworkConfigList{Name: r.Network, CNIVersion: r.CNIVersion}
	for i, raw := range r.Plugins {
		p, err := libcni.NetworkPluginConfFromBytes(raw)
		if err != nil {
			return nil, fmt.Errorf("recorded plugin %d of network %q: %w", i, r.Network, err)
		}
		l.Plugins = append(l.Plugins, p)
	}
	return l, nil
}

func (r *record) runtimeConf() *libcni.RuntimeConf {
	netns := r.NetNS
	if !isNetNS(netns) {
		// Gone (a reboot): plugins release what lives outside the namespace.
		netns = ""
	}
	return &libcni.RuntimeConf{ContainerID: r.SandboxID, NetNS: netns, IfName: r.IfName, Args: r.Args, CapabilityArgs: r.CapabilityArgs}
}

// corruptRecordError is a record file that does not decode.
type corruptRecordError struct {
	path string
	err  error
}

func (e *corruptRecordError) Error() string {
	return fmt.Sprintf("network record %s: %v", e.path, e.err)
}
func (e *corruptRecordError) Unwrap() error { return e.err }

// records is the directory of attachment records.
type records struct{ dir string }

func (s records) path(id string) (string, error) {
	if !checkpoint.ValidID(id) {
		return "", fmt.Errorf("invalid sandbox id %q", id)
	}
	return filepath.Join(s.dir, id+".json"), nil
}

func (s records) get(id string) (*record, error) {
	p, err := s.path(id)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	r := &record{}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, &corruptRecordError{path: p, err: err}
	}
	return r, nil
}

// put writes crash-safely (statefile: temp file, fsync, rename, fsync dir).
func (s records) put(r *record) error {
	p, err := s.path(r.SandboxID)
	if err != nil {
		return err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	return statefile.WriteFile(p, data, 0o600)
}

func (s records) delete(id string) error {
	p, err := s.path(id)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// ids lists the sandboxes with a record.
func (s records) ids() []string {
	ents, _ := os.ReadDir(s.dir)
	var out []string
	for _, e := range ents {
		if n := e.Name(); filepath.Ext(n) == ".json" && checkpoint.ValidID(n[:len(n)-5]) {
			out = append(out, n[:len(n)-5])
		}
	}
	return out
}
