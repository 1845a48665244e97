package stats

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// fsInfo is one statfs of a filesystem, in the units the Summary uses.
type fsInfo struct {
	at                  time.Time
	capacity, available uint64
	used                uint64
	inodes, inodesFree  uint64
	inodesUsed          uint64
	tmpfs               bool
}

// statFS reads the filesystem holding path. Sizes are in units of the
// block size f_bsize, as cAdvisor and the kubelet's volume code count them.
func statFS(path string, now time.Time) (fsInfo, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return fsInfo{}, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	bs := uint64(st.Bsize) //nolint:gosec // a block size is positive
	fi := fsInfo{
		at:         now,
		capacity:   st.Blocks * bs,
		available:  st.Bavail * bs,
		inodes:     st.Files,
		inodesFree: st.Ffree,
		tmpfs:      st.Type == unix.TMPFS_MAGIC,
	}
	if st.Bfree <= st.Blocks {
		fi.used = (st.Blocks - st.Bfree) * bs
	}
	if st.Ffree <= st.Files {
		fi.inodesUsed = st.Files - st.Ffree
	}
	return fi, nil
}

// base is the FsStats of the filesystem without any usage: the frame the
// kubelet fills per container log, volume and pod with their own usage.
func (f fsInfo) base() *statsv1alpha1.FsStats {
	return &statsv1alpha1.FsStats{
		Time:           metav1.NewTime(f.at),
		AvailableBytes: ptr(f.available),
		CapacityBytes:  ptr(f.capacity),
		Inodes:         ptr(f.inodes),
		InodesFree:     ptr(f.inodesFree),
	}
}

// whole is the FsStats of the filesystem with its own usage (nodefs).
func (f fsInfo) whole() *statsv1alpha1.FsStats {
	s := f.base()
	s.UsedBytes = ptr(f.used)
	s.InodesUsed = ptr(f.inodesUsed)
	return s
}

// diskUsage is what `du` reports: blocks allocated (512-byte units, as
// stat's st_blocks counts them) and inodes, every hard-linked inode
// counted once, without crossing into other filesystems.
type diskUsage struct {
	bytes, inodes uint64
}

// measureDir walks path like the kubelet's volume metrics do. Files that
// disappear during the walk are skipped.
func measureDir(path string) (diskUsage, error) {
	var u diskUsage
	var top syscall.Stat_t
	if err := syscall.Lstat(path, &top); err != nil {
		return u, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	seen := map[uint64]struct{}{}
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat_t", p)
		}
		if st.Dev != top.Dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if st.Nlink > 1 {
			if _, dup := seen[st.Ino]; dup {
				return nil
			}
			seen[st.Ino] = struct{}{}
		}
		u.bytes += uint64(st.Blocks) * 512 //nolint:gosec // st_blocks is never negative
		u.inodes++
		return nil
	})
	return u, err
}

// filesUsage sums the regular files directly in dir (not in its
// subdirectories), as the kubelet counts a container's or a pod's logs.
func filesUsage(dir string) (diskUsage, error) {
	var u diskUsage
	entries, err := os.ReadDir(dir)
	if err != nil {
		return u, err
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir, e.Name()), &st); err != nil {
			if errors.Is(err, syscall.ENOENT) {
				continue // rotated away meanwhile
			}
			return u, err
		}
		u.bytes += uint64(st.Blocks) * 512 //nolint:gosec // st_blocks is never negative
		u.inodes++
	}
	return u, nil
}

// duCache keeps directory walks for a period: walking a large emptyDir on
// every scrape would cost more than the numbers are worth. The kubelet
// also measures volumes in the background once a minute and serves the
// last result.
type duCache struct {
	period time.Duration
	mu     sync.Mutex
	m      map[string]*duEntry
}

type duEntry struct {
	u    diskUsage
	at   time.Time
	used time.Time
}

func newDUCache(period time.Duration) *duCache {
	return &duCache{period: period, m: make(map[string]*duEntry)}
}

// get returns the usage of dir, measured now if the kept one is older
// than the period, and when it was measured.
func (c *duCache) get(dir string, now time.Time) (diskUsage, time.Time, error) {
	c.mu.Lock()
	e, ok := c.m[dir]
	if ok {
		e.used = now
		if c.period > 0 && now.Sub(e.at) < c.period {
			u, at := e.u, e.at
			c.mu.Unlock()
			return u, at, nil
		}
	}
	c.mu.Unlock()
	// Walk outside the lock: two scrapes may walk the same dir at once,
	// which is cheaper than making every volume wait for the slowest.
	u, err := measureDir(dir)
	if err != nil {
		return u, now, err
	}
	c.mu.Lock()
	c.m[dir] = &duEntry{u: u, at: now, used: now}
	c.mu.Unlock()
	return u, now, nil
}

// expire forgets dirs no scrape asked for during the TTL (removed pods).
func (c *duCache) expire(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		if now.Sub(e.used) > rateCacheTTL {
			delete(c.m, k)
		}
	}
}

// The plugin directories podsyncd lays volumes out in, under
// <pods dir>/<uid>/volumes/.
const (
	pluginEmptyDir  = "kubernetes.io~empty-dir"
	pluginConfigMap = "kubernetes.io~configmap"
	pluginGitRepo   = "kubernetes.io~git-repo"
)

// volume is one volume directory of a pod.
type volume struct {
	name, dir, plugin string
}

// ephemeral says whether the volume counts towards the pod's ephemeral
// storage: what the kubelet calls local ephemeral (disk-backed emptyDir,
// configMap, gitRepo). Memory-backed emptyDirs (a tmpfs), secrets,
// projected and downward API volumes are reported but not counted.
func (v volume) ephemeral(onTmpfs bool) bool {
	switch v.plugin {
	case pluginEmptyDir:
		return !onTmpfs
	case pluginConfigMap, pluginGitRepo:
		return true
	}
	return false
}

// podVolumes lists a pod's volume directories, sorted by name.
func podVolumes(podDir string) ([]volume, error) {
	root := filepath.Join(podDir, "volumes")
	plugins, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []volume
	for _, pl := range plugins {
		if !pl.IsDir() {
			continue
		}
		vols, err := os.ReadDir(filepath.Join(root, pl.Name()))
		if err != nil {
			return nil, err
		}
		for _, v := range vols {
			if !v.IsDir() {
				continue
			}
			out = append(out, volume{name: v.Name(), dir: filepath.Join(root, pl.Name(), v.Name()), plugin: pl.Name()})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// addUsage adds b to *a, where a nil *a means "unknown so far".
func addUsage(a **uint64, b *uint64) {
	if b == nil {
		return
	}
	if *a == nil {
		*a = ptr(*b)
		return
	}
	**a += *b
}

// later returns the later of two times.
func later(a, b metav1.Time) metav1.Time {
	if a.Before(&b) {
		return b
	}
	return a
}

func ptr[T any](v T) *T { return &v }
