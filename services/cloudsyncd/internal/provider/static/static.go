package static

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/services/cloudsyncd/internal/provider"
)

// Name is the provider's name in the config.
const Name = "static"

// resync re-reads the file even without events: fsnotify can miss changes
// on some filesystems (NFS, overlay lower layers).
const resync = 30 * time.Second

// debounce is how long the directory must be quiet before the file is re-read.
const debounce = 100 * time.Millisecond

// Provider serves a static file.
type Provider struct {
	path string
	node string
	log  *slog.Logger

	mu      sync.Mutex
	file    *File
	err     error
	changed chan struct{}

	watcher *fsnotify.Watcher
	stop    chan struct{}
	done    chan struct{}
}

var _ provider.Provider = (*Provider)(nil)

// Option is an optional setting of New.
type Option func(*Provider)

// WithNodeName names the node the provider.Provider methods answer for: in a
// file of the cluster form it is the entry nodes.<name>. A file of the
// single-node form answers for any name.
func WithNodeName(name string) Option { return func(p *Provider) { p.node = name } }

// New reads path and starts watching it. An unreadable or invalid file is an
// error here, so a bad configuration is caught at startup.
func New(path string, log *slog.Logger, opts ...Option) (*Provider, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	p := &Provider{path: abs, changed: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	for _, o := range opts {
		o(p)
	}
	p.reload() // silently: a bad file at startup is the caller's error to report
	if p.err != nil {
		return nil, p.err
	}
	p.log = log
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", abs, err)
	}
	// Watch the directory, not the file: editors and the kubelet's ConfigMap
	// writer replace files by rename, which ends a watch on the file itself.
	if err := w.Add(filepath.Dir(abs)); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("watch %s: %w", filepath.Dir(abs), err)
	}
	p.watcher = w
	go p.loop()
	return p, nil
}

func (p *Provider) loop() {
	defer close(p.done)
	t := time.NewTicker(resync)
	defer t.Stop()
	// Writers truncate then write, or write several files in a row; waiting
	// for the events to settle avoids reading a half-written file.
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	for {
		select {
		case <-p.stop:
			return
		case _, ok := <-p.watcher.Events:
			if !ok {
				return
			}
			// Any event in the directory may be the file or a symlink it goes
			// through (..data); re-reading is cheap and reload ignores no-ops.
			settle.Reset(debounce)
		case <-settle.C:
			p.reload()
		case err, ok := <-p.watcher.Errors:
			if !ok {
				return
			}
			p.log.Warn("static provider: watch error", "file", p.path, "err", err)
		case <-t.C:
			p.reload()
		}
	}
}

func (p *Provider) reload() {
	data, err := os.ReadFile(p.path)
	var f *File
	if err == nil {
		f, err = Parse(data)
	}
	if err != nil {
		err = fmt.Errorf("static_file %s: %w", p.path, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err != nil && (p.err == nil || p.err.Error() != err.Error()):
		if p.log != nil {
			p.log.Warn("static provider: file invalid, keeping the last good content", "err", err)
		}
	case err == nil && (p.err != nil || p.file == nil || fmt.Sprint(*p.file) != fmt.Sprint(*f)):
		if p.log != nil && p.file != nil {
			p.log.Info("static provider: file loaded", "file", p.path)
		}
	default:
		return
	}
	if err == nil {
		p.file = f
	}
	p.err = err
	close(p.changed)
	p.changed = make(chan struct{})
}

// Changed returns a channel closed at the next change of the file's state.
func (p *Provider) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

// File returns the last good content of the file, or the error that makes
// the file unusable now.
func (p *Provider) File() (*File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return nil, p.err
	}
	return p.file, nil
}

// current returns the description of the provider's own node.
func (p *Provider) current() (*Node, error) {
	f, err := p.File()
	if err != nil {
		return nil, err
	}
	if len(f.Nodes) == 0 {
		return &f.Node, nil
	}
	if p.node == "" {
		return nil, fmt.Errorf("static_file %s: the file lists nodes but this node's name is not known (node_name)", p.path)
	}
	n, ok := f.Nodes[p.node]
	if !ok {
		return nil, fmt.Errorf("static_file %s: nodes: no entry for this node %q", p.path, p.node)
	}
	return &n, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// NodeAddresses implements provider.Provider.
func (p *Provider) NodeAddresses(context.Context) ([]corev1.NodeAddress, error) {
	n, err := p.current()
	if err != nil {
		return nil, err
	}
	return n.NodeAddresses(), nil
}

// InstanceMetadata implements provider.Provider.
func (p *Provider) InstanceMetadata(context.Context) (*provider.Metadata, error) {
	n, err := p.current()
	if err != nil {
		return nil, err
	}
	return n.Metadata(), nil
}

// InstanceShutdown implements provider.Provider.
func (p *Provider) InstanceShutdown(context.Context) (bool, error) {
	n, err := p.current()
	if err != nil {
		return false, err
	}
	return n.Shutdown, nil
}

// Close stops watching the file.
func (p *Provider) Close() error {
	select {
	case <-p.stop:
		return nil
	default:
	}
	close(p.stop)
	err := p.watcher.Close()
	<-p.done
	return err
}
