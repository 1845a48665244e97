package volumes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/services/podsyncd/internal/envvars"
)

// Volume is a set-up volume.
type Volume struct {
	// Path is the host path to mount.
	Path string
	// ReadOnly is forced for the API-backed volumes, as upstream does.
	ReadOnly bool
	// Image is set for an image volume (volumes[].image): it has no host
	// path; the container runtime mounts the pulled image itself.
	Image bool
}

// Tokens requests service-account tokens bound to a pod (the TokenRequest API).
type Tokens interface {
	Token(ctx context.Context, pod *corev1.Pod, audience string, expirationSeconds int64) (token string, expires time.Time, err error)
}

// Manager sets volumes up and remembers their host paths.
type Manager struct {
	root   string
	src    envvars.Source
	tokens Tokens
	clock  clock.PassiveClock

	mu     sync.Mutex
	paths  map[types.UID]map[string]Volume
	issued map[tokenKey]issuedToken
}

type tokenKey struct {
	uid      types.UID
	audience string
	seconds  int64
}

type issuedToken struct {
	token        string
	from, expiry time.Time
}

// Option configures a Manager.
type Option func(*Manager)

// WithClock sets the clock that times cached tokens (tests step it).
func WithClock(c clock.PassiveClock) Option { return func(m *Manager) { m.clock = c } }

// New returns a manager rooted at dataDir reading objects through src and
// tokens through tokens (both nil when standalone).
func New(dataDir string, src envvars.Source, tokens Tokens, opts ...Option) *Manager {
	m := &Manager{root: dataDir, src: src, tokens: tokens, clock: clock.RealClock{},
		paths: map[types.UID]map[string]Volume{}, issued: map[tokenKey]issuedToken{}}
	for _, o := range opts {
		o(m)
	}
	return m
}

// token returns a cached token while it is younger than 80% of its life
// (and a day), else a fresh one, as the kubelet's token manager does.
func (m *Manager) token(ctx context.Context, pod *corev1.Pod, p *corev1.ServiceAccountTokenProjection) ([]byte, error) {
	if m.tokens == nil {
		return nil, errors.New("service account tokens cannot be requested: this node runs without an API server")
	}
	secs := int64(3600)
	if p.ExpirationSeconds != nil {
		secs = *p.ExpirationSeconds
	}
	k := tokenKey{pod.UID, p.Audience, secs}
	now := m.clock.Now()
	m.mu.Lock()
	t, ok := m.issued[k]
	m.mu.Unlock()
	if ok && t.fresh(now) {
		return []byte(t.token), nil
	}
	tok, exp, err := m.tokens.Token(ctx, pod, p.Audience, secs)
	if err != nil {
		return nil, fmt.Errorf("failed to fetch token: %w", err)
	}
	m.mu.Lock()
	m.issued[k] = issuedToken{token: tok, from: now, expiry: exp}
	m.mu.Unlock()
	return []byte(tok), nil
}

// fresh reports whether t is younger than 80% of its life and a day at now.
// Its age is taken twice: by the monotonic clock, and by the wall clock,
// which the API server's expiry is in. The monotonic clock does not see a
// step of the wall clock, nor (on Linux) the time a suspended machine
// slept, after which the token may have expired at the server; the wall
// clock jumps with the steps. A token either reading finds old is
// refreshed, and so is one the wall clock finds issued in the future (the
// clock was stepped back): a TokenRequest is cheaper than handing a
// container a token that may no longer be valid.
func (t issuedToken) fresh(now time.Time) bool {
	limit := min(t.expiry.Sub(t.from)*8/10, 24*time.Hour)
	for _, age := range []time.Duration{now.Sub(t.from), now.Round(0).Sub(t.from.Round(0))} {
		if age < 0 || age >= limit {
			return false
		}
	}
	return true
}

// PodDir is the pod's directory under the data dir.
func (m *Manager) PodDir(uid types.UID) string { return filepath.Join(m.root, "pods", string(uid)) }

// PodUIDs lists the pods that have a directory under the data dir, whether
// or not the manager set them up in this process: what a crash or a failed
// Cleanup left behind is found here.
func (m *Manager) PodUIDs() ([]types.UID, error) {
	entries, err := os.ReadDir(filepath.Join(m.root, "pods"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]types.UID, 0, len(entries))
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, types.UID(e.Name()))
		}
	}
	return out, nil
}

// Paths returns the set-up volumes of a pod by name.
func (m *Manager) Paths(uid types.UID) map[string]Volume {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]Volume{}
	for k, v := range m.paths[uid] {
		out[k] = v
	}
	return out
}

// Cleanup removes a pod's volume dirs (never a hostPath's contents).
func (m *Manager) Cleanup(uid types.UID) error {
	m.mu.Lock()
	delete(m.paths, uid)
	for k := range m.issued {
		if k.uid == uid {
			delete(m.issued, k)
		}
	}
	m.mu.Unlock()
	if err := m.unmountEmptyDirs(uid); err != nil {
		// Removing the files under a still-mounted tmpfs would leave it
		// mounted and empty; keep the dir for the next attempt.
		return err
	}
	if err := m.unshare(uid); err != nil {
		return err
	}
	return os.RemoveAll(m.PodDir(uid))
}

// Setup creates or refreshes every volume of the pod. It is called on every
// pod sync, so API-backed volumes follow their objects while the pod runs.
func (m *Manager) Setup(ctx context.Context, pod *corev1.Pod, info envvars.Info) error {
	out := map[string]Volume{}
	var errs []error
	if needsPropagation(pod) {
		// Before the volumes, so a tmpfs emptyDir is mounted inside.
		if err := makeShared(m.volumesDir(pod.UID)); err != nil {
			return err
		}
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		vol, err := m.setupOne(ctx, pod, v, info)
		if err != nil {
			errs = append(errs, fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", v.Name, err))
			continue
		}
		out[v.Name] = vol
	}
	m.mu.Lock()
	m.paths[pod.UID] = out
	m.mu.Unlock()
	return errors.Join(errs...)
}

func (m *Manager) volDir(pod *corev1.Pod, plugin, name string) string {
	return filepath.Join(m.PodDir(pod.UID), "volumes", plugin, name)
}

func (m *Manager) setupOne(ctx context.Context, pod *corev1.Pod, v *corev1.Volume, info envvars.Info) (Volume, error) {
	switch {
	case v.EmptyDir != nil:
		return m.setupEmptyDir(pod, v, info)
	case v.HostPath != nil:
		return Volume{Path: v.HostPath.Path}, checkHostPath(v.HostPath)
	case v.Image != nil:
		// Nothing to make on the host: podruntime pulls the image and the
		// runtime mounts it read-only (a CRI mount with image set).
		return Volume{ReadOnly: true, Image: true}, nil
	case v.ConfigMap != nil, v.Secret != nil, v.DownwardAPI != nil, v.Projected != nil:
		files, err := m.payload(ctx, pod, v, info)
		if err != nil {
			return Volume{}, err
		}
		plugin := "kubernetes.io~configmap"
		switch {
		case v.Secret != nil:
			plugin = "kubernetes.io~secret"
		case v.DownwardAPI != nil:
			plugin = "kubernetes.io~downward-api"
		case v.Projected != nil:
			plugin = "kubernetes.io~projected"
		}
		gid := fsGroupOf(pod)
		if gid != nil {
			// The group's read bits are part of the expected content, so
			// an unchanged volume is not rewritten on every sync.
			for p, f := range files {
				f.mode |= roMask
				files[p] = f
			}
		}
		dir := m.volDir(pod, plugin, v.Name)
		return Volume{Path: dir, ReadOnly: true}, writeAtomic(dir, files, gid)
	}
	return Volume{}, errors.New("volume type not supported by this node")
}

func checkHostPath(h *corev1.HostPathVolumeSource) error {
	t := corev1.HostPathUnset
	if h.Type != nil {
		t = *h.Type
	}
	fi, err := os.Stat(h.Path)
	exists := err == nil
	switch t {
	case corev1.HostPathUnset:
		return nil
	case corev1.HostPathDirectoryOrCreate:
		if !exists {
			return os.MkdirAll(h.Path, 0o755)
		}
		if !fi.IsDir() {
			return fmt.Errorf("hostPath type check failed: %s is not a directory", h.Path)
		}
		return nil
	case corev1.HostPathFileOrCreate:
		if !exists {
			if err := os.MkdirAll(filepath.Dir(h.Path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(h.Path, os.O_CREATE|os.O_RDONLY, 0o644)
			if err != nil {
				return err
			}
			return f.Close()
		}
		if fi.IsDir() {
			return fmt.Errorf("hostPath type check failed: %s is not a file", h.Path)
		}
		return nil
	}
	if !exists {
		return fmt.Errorf("hostPath type check failed: %s does not exist", h.Path)
	}
	mode := fi.Mode()
	ok := map[corev1.HostPathType]bool{
		corev1.HostPathDirectory: mode.IsDir(),
		corev1.HostPathFile:      mode.IsRegular(),
		corev1.HostPathSocket:    mode&fs.ModeSocket != 0,
		corev1.HostPathCharDev:   mode&fs.ModeCharDevice != 0,
		corev1.HostPathBlockDev:  mode&fs.ModeDevice != 0 && mode&fs.ModeCharDevice == 0,
	}
	good, known := ok[t]
	if !known {
		return fmt.Errorf("hostPath type %q is not known", t)
	}
	if !good {
		return fmt.Errorf("hostPath type check failed: %s is not a %s", h.Path, t)
	}
	return nil
}

// file is one file of an API-backed volume.
type file struct {
	data []byte
	mode os.FileMode
}

func mode(item *int32, def *int32, fallback int32) os.FileMode {
	switch {
	case item != nil:
		return os.FileMode(*item)
	case def != nil:
		return os.FileMode(*def)
	}
	return os.FileMode(fallback)
}

func (m *Manager) payload(ctx context.Context, pod *corev1.Pod, v *corev1.Volume, info envvars.Info) (map[string]file, error) {
	files := map[string]file{}
	switch {
	case v.ConfigMap != nil:
		return files, m.configMapFiles(ctx, pod, &v.ConfigMap.LocalObjectReference, v.ConfigMap.Items, v.ConfigMap.Optional, v.ConfigMap.DefaultMode, files)
	case v.Secret != nil:
		ref := corev1.LocalObjectReference{Name: v.Secret.SecretName}
		return files, m.secretFiles(ctx, pod, &ref, v.Secret.Items, v.Secret.Optional, v.Secret.DefaultMode, files)
	case v.DownwardAPI != nil:
		return files, downwardFiles(pod, v.DownwardAPI.Items, v.DownwardAPI.DefaultMode, info, files)
	}
	p := v.Projected
	for _, s := range p.Sources {
		var err error
		switch {
		case s.ConfigMap != nil:
			err = m.configMapFiles(ctx, pod, &s.ConfigMap.LocalObjectReference, s.ConfigMap.Items, s.ConfigMap.Optional, p.DefaultMode, files)
		case s.Secret != nil:
			err = m.secretFiles(ctx, pod, &s.Secret.LocalObjectReference, s.Secret.Items, s.Secret.Optional, p.DefaultMode, files)
		case s.DownwardAPI != nil:
			err = downwardFiles(pod, s.DownwardAPI.Items, p.DefaultMode, info, files)
		case s.ServiceAccountToken != nil:
			var tok []byte
			if tok, err = m.token(ctx, pod, s.ServiceAccountToken); err == nil {
				files[s.ServiceAccountToken.Path] = file{tok, mode(nil, p.DefaultMode, 0o644)}
			}
		default:
			err = errors.New("projected source not supported by this node (clusterTrustBundle, podCertificate)")
		}
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

func keyed(data map[string][]byte, items []corev1.KeyToPath, def *int32, kind, ns, name string, files map[string]file) error {
	if len(items) == 0 {
		for k, d := range data {
			files[k] = file{d, mode(nil, def, 0o644)}
		}
		return nil
	}
	for _, it := range items {
		d, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("configuration error: key %q not found in %s %s/%s", it.Key, kind, ns, name)
		}
		files[it.Path] = file{d, mode(it.Mode, def, 0o644)}
	}
	return nil
}

func (m *Manager) configMapFiles(ctx context.Context, pod *corev1.Pod, ref *corev1.LocalObjectReference, items []corev1.KeyToPath, optional *bool, def *int32, files map[string]file) error {
	if m.src == nil {
		return fmt.Errorf("configmap %q cannot be read: this node runs without an API server", ref.Name)
	}
	cm, err := m.src.ConfigMap(ctx, pod.Namespace, ref.Name)
	if err != nil {
		if optional != nil && *optional && apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	if optional != nil && *optional && len(items) > 0 {
		items = present(items, data)
	}
	return keyed(data, items, def, "ConfigMap", pod.Namespace, ref.Name, files)
}

func (m *Manager) secretFiles(ctx context.Context, pod *corev1.Pod, ref *corev1.LocalObjectReference, items []corev1.KeyToPath, optional *bool, def *int32, files map[string]file) error {
	if m.src == nil {
		return fmt.Errorf("secret %q cannot be read: this node runs without an API server", ref.Name)
	}
	s, err := m.src.Secret(ctx, pod.Namespace, ref.Name)
	if err != nil {
		if optional != nil && *optional && apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	if optional != nil && *optional && len(items) > 0 {
		items = present(items, s.Data)
	}
	return keyed(s.Data, items, def, "Secret", pod.Namespace, ref.Name, files)
}

func present(items []corev1.KeyToPath, data map[string][]byte) []corev1.KeyToPath {
	var out []corev1.KeyToPath
	for _, it := range items {
		if _, ok := data[it.Key]; ok {
			out = append(out, it)
		}
	}
	return out
}

func downwardFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, def *int32, info envvars.Info, files map[string]file) error {
	for _, it := range items {
		var (
			v   string
			err error
		)
		switch {
		case it.FieldRef != nil:
			v, err = envvars.FieldValue(pod, it.FieldRef.FieldPath, info)
		case it.ResourceFieldRef != nil:
			c := &corev1.Container{}
			if len(pod.Spec.Containers) > 0 {
				c = &pod.Spec.Containers[0]
			}
			v, err = envvars.ResourceValue(pod, c, it.ResourceFieldRef, info.Allocatable)
		default:
			err = fmt.Errorf("downwardAPI item %s has no source", it.Path)
		}
		if err != nil {
			return err
		}
		files[it.Path] = file{[]byte(v), mode(it.Mode, def, 0o644)}
	}
	return nil
}

const dataLink = "..data"

// writeAtomic makes dir hold exactly files. Nothing is written when the
// current content already matches; otherwise a new "..<timestamp>" dir is
// filled, "..data" is swapped to it by rename, top-level names link through
// "..data", and the old dir goes. With an fsGroup, the new files belong to
// the group before they become visible, and so do the links and dir.
func writeAtomic(dir string, files map[string]file, fsGroup *int64) error {
	for p := range files {
		if p == "" || path.IsAbs(p) || strings.HasPrefix(p, "..") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") {
			return fmt.Errorf("invalid file path %q", p)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, _ := os.Readlink(filepath.Join(dir, dataLink))
	if old != "" && same(filepath.Join(dir, old), files) {
		return nil
	}
	ts, err := os.MkdirTemp(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		return err
	}
	for p, f := range files {
		full := filepath.Join(ts, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, f.data, f.mode.Perm()); err != nil {
			return err
		}
		if err := os.Chmod(full, f.mode.Perm()); err != nil {
			return err
		}
	}
	if fsGroup != nil {
		if err := SetOwnership(ts, *fsGroup, true, nil); err != nil {
			return err
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, dataLink)); err != nil {
		return err
	}
	top := map[string]bool{}
	for p := range files {
		top[strings.SplitN(p, "/", 2)[0]] = true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "..") {
			if name != dataLink && name != filepath.Base(ts) {
				_ = os.RemoveAll(filepath.Join(dir, name))
			}
			continue
		}
		if !top[name] {
			_ = os.Remove(filepath.Join(dir, name))
		}
	}
	for name := range top {
		link := filepath.Join(dir, name)
		if target, err := os.Readlink(link); err == nil && target == filepath.Join(dataLink, name) {
			continue
		}
		_ = os.Remove(link)
		if err := os.Symlink(filepath.Join(dataLink, name), link); err != nil {
			return err
		}
	}
	if fsGroup != nil {
		return ownTopLevel(dir, *fsGroup)
	}
	return nil
}

// ownTopLevel gives the volume dir and its links (not the data dirs, done
// before the swap) the fsGroup.
func ownTopLevel(dir string, fsGroup int64) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		if err := changeOne(filepath.Join(dir, e.Name()), info, fsGroup, true); err != nil {
			return err
		}
	}
	info, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	return changeOne(dir, info, fsGroup, true)
}

// same says whether dir holds exactly files with the same modes.
func same(dir string, files map[string]file) bool {
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		f, ok := files[filepath.ToSlash(rel)]
		if !ok {
			return errors.New("extra")
		}
		fi, err := d.Info()
		if err != nil || fi.Mode().Perm() != f.mode.Perm() {
			return errors.New("mode")
		}
		data, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(data, f.data) {
			return errors.New("data")
		}
		n++
		return nil
	})
	return err == nil && n == len(files)
}
