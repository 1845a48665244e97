package sources

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/internal/podsource"
	"github.com/microlet/microlet/services/podconfig/internal/manifest"
)

// File is the static-pod directory source.
type File struct {
	// Path is a directory of manifests or a single manifest file.
	Path string
	// NodeName is this node's name.
	NodeName string
	// Period is how often the path is re-listed besides fsnotify.
	Period time.Duration
	// Clock drives the re-list and the retries; the real clock when nil.
	Clock clock.WithTicker
	// Log receives one line per problem.
	Log *slog.Logger
	// Report hears about problems; optional.
	Report Reporter

	files   map[string]*fileEntry
	pathErr error
}

// fileEntry caches a parsed manifest by the file's identity and change
// time, so a re-list does not parse thousands of unchanged files again.
type fileEntry struct {
	stamp fileStamp
	pod   *corev1.Pod
	err   error
}

type fileStamp struct {
	size, ino   uint64
	mtime, ctim int64
}

func stampOf(fi os.FileInfo) fileStamp {
	st := fileStamp{size: uint64(fi.Size()), mtime: fi.ModTime().UnixNano()}
	if s, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = s.Ino
		st.ctim = s.Ctim.Nano()
	}
	return st
}

// Run delivers the path's pods to sink until ctx ends.
func (f *File) Run(ctx context.Context, sink Sink) error {
	if f.Clock == nil {
		f.Clock = clock.RealClock{}
	}
	if f.Log == nil {
		f.Log = slog.Default()
	}
	if f.Report == nil {
		f.Report = nopReporter{}
	}
	if f.Period <= 0 {
		f.Period = 20 * time.Second
	}
	f.Path = strings.TrimRight(f.Path, string(os.PathSeparator))
	f.files = map[string]*fileEntry{}

	ticker := f.Clock.NewTicker(f.Period)
	defer ticker.Stop()
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 20 * time.Second}

	for {
		// Each round lists the path, then follows fsnotify until the watch
		// breaks (the path vanished or was replaced); a missing path is an
		// empty set, retried with backoff.
		watched, err := f.watch(ctx, sink, ticker)
		if ctx.Err() != nil {
			return nil
		}
		if watched {
			// The path was there and watched until it went away (an editor
			// or tool replacing it): start the retries short again.
			backoff.Duration, backoff.Steps = time.Second, 1<<30
		}
		if err != nil {
			f.Log.Warn("manifest path not watchable, retrying", "path", f.Path, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-f.Clock.After(backoff.Step()):
		}
	}
}

// watch lists the path and follows it; it returns when the watch breaks,
// saying whether the path was being watched at all.
func (f *File) watch(ctx context.Context, sink Sink, ticker clock.Ticker) (bool, error) {
	w, werr := fsnotify.NewWatcher()
	if werr != nil {
		return false, fmt.Errorf("inotify: %w", werr)
	}
	defer func() { _ = w.Close() }()
	// Watch before listing, so nothing written in between is missed.
	werr = w.Add(f.Path)
	f.relist(sink)
	if werr != nil {
		if errors.Is(werr, os.ErrNotExist) {
			return false, fmt.Errorf("%s does not exist", f.Path)
		}
		return false, fmt.Errorf("watch %s: %w", f.Path, werr)
	}
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case <-ticker.C():
			f.relist(sink)
		case err, ok := <-w.Errors:
			if !ok {
				return true, errors.New("watcher closed")
			}
			return true, fmt.Errorf("watch %s: %w", f.Path, err)
		case ev, ok := <-w.Events:
			if !ok {
				return true, errors.New("watcher closed")
			}
			broken, closed := f.takeBurst(ev, w.Events, sink)
			if closed {
				return true, errors.New("watcher closed")
			}
			if broken {
				return true, fmt.Errorf("%s was removed or replaced", f.Path)
			}
		}
	}
}

// takeBurst applies ev and whatever events are already queued behind it,
// then sends the set once, so a burst of writes becomes one set. A file
// removed and created again within the burst sends the set in between: a
// manifest deleted and written back with the same content has the same
// UID, and folding the two away would hide from the node that the pod was
// removed and added again (the kubelet, which sees every event, restarts
// it). It reports whether the watched path itself went away and whether
// the events channel closed.
func (f *File) takeBurst(ev fsnotify.Event, events <-chan fsnotify.Event, sink Sink) (broken, closed bool) {
	removed := map[string]bool{}
	apply := func(ev fsnotify.Event) bool {
		name := filepath.Clean(ev.Name)
		if ev.Op&(fsnotify.Create|fsnotify.Write) != 0 && removed[name] {
			sink(podsource.FileSource, f.current())
			clear(removed)
		}
		if ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
			removed[name] = true
		}
		return f.handle(ev)
	}
	broken = apply(ev)
drain:
	for !broken {
		select {
		case next, ok := <-events:
			if !ok {
				closed = true
				break drain
			}
			broken = apply(next)
		default:
			break drain
		}
	}
	sink(podsource.FileSource, f.current())
	return broken, closed
}

// handle applies one fsnotify event to the cache. It reports whether the
// watched path itself went away.
func (f *File) handle(ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	if name == f.Path && ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
		delete(f.files, name)
		return true
	}
	if strings.HasPrefix(filepath.Base(name), ".") {
		return false
	}
	switch {
	case ev.Op&(fsnotify.Create|fsnotify.Write|fsnotify.Chmod) != 0:
		f.readOne(name)
	case ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0:
		delete(f.files, name)
	}
	return false
}

// relist reads the whole path and sends the set.
func (f *File) relist(sink Sink) {
	fi, err := os.Stat(f.Path)
	f.pathErr = err
	switch {
	case err != nil:
		if errors.Is(err, os.ErrNotExist) {
			f.pathErr = fmt.Errorf("%s does not exist", f.Path)
		}
		f.Report.Error(podsource.FileSource, f.Path, f.pathErr)
		f.Log.Warn("cannot read manifest path; no file pods", "path", f.Path, "err", err)
		// A missing path is an empty set: the source is ready, with no pods.
		clear(f.files)
	case fi.IsDir():
		ents, err := os.ReadDir(f.Path)
		if err != nil {
			f.pathErr = err
			f.Report.Error(podsource.FileSource, f.Path, err)
			f.Log.Error("cannot list manifest directory", "path", f.Path, "err", err)
			return
		}
		seen := make(map[string]bool, len(ents))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			p := filepath.Join(f.Path, e.Name())
			seen[p] = true
			f.readOne(p)
		}
		for p := range f.files {
			if !seen[p] {
				delete(f.files, p)
			}
		}
	default:
		for p := range f.files {
			if p != f.Path {
				delete(f.files, p)
			}
		}
		f.readOne(f.Path)
	}
	sink(podsource.FileSource, f.current())
}

// readOne (re)reads one manifest into the cache unless it is unchanged.
func (f *File) readOne(p string) {
	fi, err := os.Stat(p)
	if err != nil {
		delete(f.files, p)
		return
	}
	if p != f.Path || !fi.Mode().IsRegular() {
		switch {
		case fi.IsDir():
			if p != f.Path {
				f.skip(p, "is a directory; manifest directories are not recursed")
			}
			return
		case !fi.Mode().IsRegular():
			f.skip(p, fmt.Sprintf("is not a regular file (mode %s)", fi.Mode()))
			return
		}
	}
	st := stampOf(fi)
	if e, ok := f.files[p]; ok && e.stamp == st {
		return
	}
	e := &fileEntry{stamp: st}
	f.files[p] = e
	if fi.Size() > manifest.MaxSize {
		e.err = fmt.Errorf("%w (%d bytes)", manifest.ErrTooLarge, fi.Size())
	} else {
		e.pod, e.err = f.parse(p)
	}
	if e.err != nil {
		e.pod = nil
		f.Report.Error(podsource.FileSource, p, e.err)
		f.Log.Error("skipping bad manifest", "path", p, "err", e.err)
	}
}

func (f *File) skip(p, why string) {
	delete(f.files, p)
	f.Log.Debug("skipping manifest path", "path", p, "reason", why)
}

func (f *File) parse(p string) (*corev1.Pod, error) {
	fh, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer func() { _ = fh.Close() }()
	data, err := io.ReadAll(io.LimitReader(fh, manifest.MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > manifest.MaxSize {
		return nil, manifest.ErrTooLarge
	}
	return manifest.ParsePod(data, manifest.Source{NodeName: f.NodeName, Location: p, File: true})
}

// current is the set of good pods, in file name order. It also tells the
// Reporter when no file is bad any more.
func (f *File) current() []*corev1.Pod {
	names := make([]string, 0, len(f.files))
	bad := f.pathErr != nil
	for p, e := range f.files {
		if e.pod != nil {
			names = append(names, p)
		}
		bad = bad || e.err != nil
	}
	if !bad {
		f.Report.OK(podsource.FileSource)
	}
	sort.Strings(names)
	pods := make([]*corev1.Pod, 0, len(names))
	for _, p := range names {
		pods = append(pods, f.files[p].pod)
	}
	return pods
}
