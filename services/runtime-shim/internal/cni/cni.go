package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/statefile"
)

// Defaults of the configuration and binary directories.
const (
	DefaultConfDir = "/etc/cni/net.d"
	DefaultBinDir  = "/opt/cni/bin"
	// DefaultBridge is the bridge of the generated pod network.
	DefaultBridge = "cni0"
	// IfName is the pod's interface.
	IfName = "eth0"
)

// PodNetworkBridge is the pod network kind UpdatePodCIDR writes a
// configuration for: a node-local bridge with host-local addresses from
// the node's pod CIDRs, as the kubelet's kubenet did.
const PodNetworkBridge = "bridge"

// ErrNotReady wraps every error that means no usable network configuration.
var ErrNotReady = errors.New("network plugin not ready")

// Options configure a Manager.
type Options struct {
	// ConfDir holds the network configuration (DefaultConfDir when empty).
	ConfDir string
	// BinDirs are searched for plugins (DefaultBinDir when empty).
	BinDirs []string
	// DataDir holds the attachment records, pinned namespaces, libcni's
	// result cache and the generated network's host-local store.
	DataDir string
	// PodNetwork is "" (the configuration is the operator's) or
	// PodNetworkBridge.
	PodNetwork string
	// Bridge names the generated network's bridge (DefaultBridge when empty).
	Bridge string
	// Log is the logger; nil uses slog.Default.
	Log *slog.Logger
}

// Manager runs the CNI plugins for the shim's sandboxes.
type Manager struct {
	opts Options
	cni  *libcni.CNIConfig
	recs records
	log  *slog.Logger

	mu      sync.Mutex // guards the loaded configuration
	loaded  bool
	stamps  []fileStamp
	net     *network
	loadErr error

	locks sync.Map // sandbox ID -> *sync.Mutex
}

// New returns a Manager; it reads nothing until asked.
func New(opts Options) (*Manager, error) {
	if opts.ConfDir == "" {
		opts.ConfDir = DefaultConfDir
	}
	if len(opts.BinDirs) == 0 {
		opts.BinDirs = []string{DefaultBinDir}
	}
	if opts.Bridge == "" {
		opts.Bridge = DefaultBridge
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	switch opts.PodNetwork {
	case "", PodNetworkBridge:
	default:
		return nil, fmt.Errorf("pod_network: %q is not %q or empty", opts.PodNetwork, PodNetworkBridge)
	}
	if opts.DataDir == "" {
		return nil, errors.New("cni: data dir is required")
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("cni data dir: %w", err)
	}
	return &Manager{
		opts: opts,
		cni:  libcni.NewCNIConfigWithCacheDir(opts.BinDirs, filepath.Join(opts.DataDir, "cache"), nil),
		recs: records{dir: filepath.Join(opts.DataDir, "sandboxes")},
		log:  opts.Log,
	}, nil
}

func (m *Manager) lock(id string) func() {
	v, _ := m.locks.LoadOrStore(id, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// current is the network configuration in force, read again when the
// directory's files changed, with every plugin present.
func (m *Manager) current() (*network, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := stamps(m.opts.ConfDir)
	if !m.loaded || !sameStamps(st, m.stamps) {
		n, err := loadDir(m.opts.ConfDir)
		m.loaded, m.stamps, m.net, m.loadErr = true, st, n, err
		if err != nil {
			m.log.Warn("no usable CNI network config", "dir", m.opts.ConfDir, "err", err)
		} else {
			m.log.Info("CNI network config loaded", "file", n.file, "network", n.list.Name, "plugins", len(n.list.Plugins))
		}
	}
	if m.loadErr != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotReady, m.loadErr)
	}
	if err := checkPlugins(m.net, m.opts.BinDirs); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	return m.net, nil
}

// Status is nil when a valid configuration exists and its plugins are
// installed; otherwise an error (wrapping ErrNotReady) naming what is
// missing or broken.
func (m *Manager) Status() error {
	_, err := m.current()
	return err
}

// SetUp attaches the sandbox whose pause process is pid to the network:
// it pins the namespace, records the attachment and runs ADD. A previous
// attachment of the sandbox (its pause container started again) is torn
// down first. On failure nothing is left attached.
func (m *Manager) SetUp(ctx context.Context, sandboxID string, pid int, c *runtimeapi.PodSandboxConfig) error {
	defer m.lock(sandboxID)()
	n, err := m.current()
	if err != nil {
		return err
	}
	caps, err := capabilityArgs(c)
	if err != nil {
		return err
	}
	if old, err := m.recs.get(sandboxID); err == nil {
		if err := m.tearDown(ctx, old); err != nil {
			return fmt.Errorf("tear down the sandbox's previous network: %w", err)
		}
	}
	md := c.GetMetadata()
	rec := &record{
		SandboxID: sandboxID, NetNS: filepath.Join(m.opts.DataDir, "netns", sandboxID), IfName: IfName,
		Network: n.list.Name, CNIVersion: n.list.CNIVersion, File: n.file, DisableCheck: n.list.DisableCheck,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", md.GetNamespace()},
			{"K8S_POD_NAME", md.GetName()},
			{"K8S_POD_INFRA_CONTAINER_ID", sandboxID},
			{"K8S_POD_UID", md.GetUid()},
		},
		CapabilityArgs: caps,
	}
	for _, p := range n.list.Plugins {
		rec.Plugins = append(rec.Plugins, json.RawMessage(p.Bytes))
	}
	if err := pinNetNS(pid, rec.NetNS); err != nil {
		return err
	}
	if err := m.recs.put(rec); err != nil {
		unpinNetNS(rec.NetNS)
		return fmt.Errorf("network record: %w", err)
	}
	res, err := m.cni.AddNetworkList(ctx, n.list, rec.runtimeConf())
	if err != nil {
		err = fmt.Errorf("network %q (%s): %w", n.list.Name, n.file, err)
		if derr := m.tearDown(context.WithoutCancel(ctx), rec); derr != nil {
			m.log.Warn("undo of a failed CNI ADD failed; StopPodSandbox retries it", "sandbox", sandboxID, "err", derr)
		}
		return err
	}
	rec.Added = true
	if rec.IPs, err = podIPs(res); err != nil {
		m.log.Warn("CNI result without usable IPs", "sandbox", sandboxID, "err", err)
	}
	if err := m.recs.put(rec); err != nil {
		return fmt.Errorf("network record: %w", err)
	}
	m.log.Debug("CNI ADD", "sandbox", sandboxID, "network", rec.Network, "ips", rec.IPs)
	return nil
}

// TearDown runs DEL for the sandbox's attachment with the configuration
// and arguments of its ADD, then releases the pinned namespace and the
// record. A sandbox without a record (never attached, or already torn
// down) is no error; a namespace that is gone is passed as empty, so the
// plugins still release the address and host rules.
func (m *Manager) TearDown(ctx context.Context, sandboxID string) error {
	defer m.lock(sandboxID)()
	rec, err := m.recs.get(sandboxID)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var corrupt *corruptRecordError
	if errors.As(err, &corrupt) {
		return m.tearDownCorrupt(ctx, sandboxID, corrupt)
	}
	if err != nil {
		return err
	}
	return m.tearDown(ctx, rec)
}

// tearDownCorrupt handles a record that no longer decodes (a torn write
// before statefile, a disk error): the file is moved aside, and DEL runs
// best-effort with what is still known, the pinned namespace, the sandbox
// ID and the network configured now, so IPAM releases the address. If no
// network is configured, only the namespace is released; the sandbox is
// never left failing teardown forever.
func (m *Manager) tearDownCorrupt(ctx context.Context, sandboxID string, corrupt *corruptRecordError) error {
	if _, err := statefile.Quarantine(m.log, corrupt.path, corrupt.err); err != nil {
		return err
	}
	rec := &record{
		SandboxID: sandboxID, NetNS: filepath.Join(m.opts.DataDir, "netns", sandboxID), IfName: IfName,
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_INFRA_CONTAINER_ID", sandboxID}},
	}
	n, err := m.current()
	if err != nil {
		m.log.Warn("no CNI network to run DEL with for a sandbox whose record was corrupt; releasing only its namespace", "sandbox", sandboxID, "err", err)
		unpinNetNS(rec.NetNS)
		return nil
	}
	rec.Network, rec.CNIVersion, rec.File = n.list.Name, n.list.CNIVersion, n.file
	for _, p := range n.list.Plugins {
		rec.Plugins = append(rec.Plugins, json.RawMessage(p.Bytes))
	}
	return m.tearDown(ctx, rec)
}

func (m *Manager) tearDown(ctx context.Context, rec *record) error {
	list, err := rec.list()
	if err != nil {
		return err
	}
	if err := m.cni.DelNetworkList(ctx, list, rec.runtimeConf()); err != nil {
		return fmt.Errorf("network %q (%s): %w", rec.Network, rec.File, err)
	}
	unpinNetNS(rec.NetNS)
	if err := m.recs.delete(rec.SandboxID); err != nil {
		return err
	}
	m.log.Debug("CNI DEL", "sandbox", rec.SandboxID, "network", rec.Network)
	return nil
}

// Check runs CHECK for the sandbox's attachment with the configuration
// and arguments of its ADD. It is nil when the plugins find everything in
// place, and also when the network opts out (disableCheck) or predates
// CHECK (CNI before 0.4.0); an error when the sandbox is not attached or a
// plugin finds something missing.
func (m *Manager) Check(ctx context.Context, sandboxID string) error {
	defer m.lock(sandboxID)()
	rec, err := m.recs.get(sandboxID)
	if errors.Is(err, os.ErrNotExist) {
		return errors.New("not attached")
	}
	if err != nil {
		return err
	}
	if !rec.Added {
		return errors.New("ADD did not complete")
	}
	if rec.DisableCheck {
		return nil
	}
	list, err := rec.list()
	if err != nil {
		return err
	}
	err = m.cni.CheckNetworkList(ctx, list, rec.runtimeConf())
	if errors.Is(err, libcni.ErrorCheckNotSupp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("network %q (%s): %w", rec.Network, rec.File, err)
	}
	return nil
}

// PodIPs are the sandbox's addresses from its ADD result, IPv4 first;
// none when it has no completed attachment.
func (m *Manager) PodIPs(sandboxID string) []string {
	rec, err := m.recs.get(sandboxID)
	if err != nil || !rec.Added {
		return nil
	}
	return rec.IPs
}

// Attached reports whether the sandbox has a completed attachment.
func (m *Manager) Attached(sandboxID string) bool {
	rec, err := m.recs.get(sandboxID)
	return err == nil && rec.Added
}

// Sandboxes lists the sandboxes with a record (attached, or an ADD or DEL
// that did not finish).
func (m *Manager) Sandboxes() []string { return m.recs.ids() }

// podIPs takes the addresses of the result's sandbox interfaces (all of
// them when the result names no interface), IPv4 first.
func podIPs(res types.Result) ([]string, error) {
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, err
	}
	var v4, v6 []string
	for _, ipc := range r.IPs {
		if ipc.Interface != nil && *ipc.Interface >= 0 && *ipc.Interface < len(r.Interfaces) && r.Interfaces[*ipc.Interface].Sandbox == "" {
			continue
		}
		if ipc.Address.IP.To4() != nil {
			v4 = append(v4, ipc.Address.IP.String())
		} else if ipc.Address.IP.To16() != nil {
			v6 = append(v6, ipc.Address.IP.String())
		}
	}
	out := append(v4, v6...)
	if len(out) == 0 {
		return nil, errors.New("no IP address in the result")
	}
	return out, nil
}
