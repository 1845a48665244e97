package imagevolume

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// LabelExtract marks the short-lived containers Store creates to export an
// image; its value is the store's owner (the shim's instance).
const LabelExtract = "io.microlet.image-volume-extract"

// Docker is what Store needs of the Docker client.
type Docker interface {
	ImageInspect(ctx context.Context, image string, opts ...client.ImageInspectOption) (client.ImageInspectResult, error)
	ContainerCreate(ctx context.Context, opts client.ContainerCreateOptions) (client.ContainerCreateResult, error)
	ContainerExport(ctx context.Context, id string, opts client.ContainerExportOptions) (client.ContainerExportResult, error)
	ContainerRemove(ctx context.Context, id string, opts client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
}

// Store extracts images into Dir, one directory per image ID.
type Store struct {
	docker Docker
	dir    string
	owner  string

	mu       sync.Mutex
	inflight map[string]*extraction
}

type extraction struct {
	done chan struct{}
	err  error
}

// New returns a Store keeping its extractions in dir (created when
// missing); owner labels its temporary containers (LabelExtract).
func New(docker Docker, dir, owner string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("image volume store: %w", err)
	}
	return &Store{docker: docker, dir: dir, owner: owner, inflight: map[string]*extraction{}}, nil
}

// Path returns the directory of image's root filesystem, extracting it on
// first use, or of subPath inside it (an image volume's subPath: relative,
// no "..", present in the image). Concurrent callers for one image share
// one extraction.
func (s *Store) Path(ctx context.Context, image, subPath string) (string, error) {
	if err := CheckSubPath(subPath); err != nil {
		return "", err
	}
	inspect, err := s.docker.ImageInspect(ctx, image)
	if err != nil {
		return "", fmt.Errorf("image volume %s: %w", image, err)
	}
	id := strings.TrimPrefix(inspect.ID, "sha256:")
	if id == "" || strings.ContainsAny(id, "/.") {
		return "", fmt.Errorf("image volume %s: unexpected image ID %q", image, inspect.ID)
	}
	root := filepath.Join(s.dir, id)
	if err := s.ensure(ctx, inspect.ID, root); err != nil {
		return "", fmt.Errorf("image volume %s: %w", image, err)
	}
	if subPath == "" {
		return root, nil
	}
	p := filepath.Join(root, filepath.Clean(subPath))
	// Every component must be a real directory or file of the image: a
	// symbolic link could point anywhere on the host once bind-mounted.
	for q := p; q != root; q = filepath.Dir(q) {
		fi, err := os.Lstat(q)
		if err != nil {
			return "", fmt.Errorf("image volume %s: sub path %q: %w", image, subPath, err)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return "", fmt.Errorf("image volume %s: sub path %q: %s is a symbolic link", image, subPath, strings.TrimPrefix(q, root+"/"))
		}
	}
	return p, nil
}

// CheckSubPath validates an image volume's sub path: empty, or relative
// and not leaving the image ("..").
func CheckSubPath(subPath string) error {
	if subPath == "" {
		return nil
	}
	clean := filepath.Clean(subPath)
	if filepath.IsAbs(subPath) || clean == ".." || strings.HasPrefix(clean, "../") {
		return fmt.Errorf("image sub path %q must be relative and inside the image", subPath)
	}
	return nil
}

// ensure extracts the image into root unless root exists.
func (s *Store) ensure(ctx context.Context, imageID, root string) error {
	if _, err := os.Stat(root); err == nil {
		return nil
	}
	s.mu.Lock()
	if e, ok := s.inflight[root]; ok {
		s.mu.Unlock()
		select {
		case <-e.done:
			return e.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e := &extraction{done: make(chan struct{})}
	s.inflight[root] = e
	s.mu.Unlock()

	// The extraction outlives a caller that gives up: others may wait for it.
	e.err = s.extract(context.WithoutCancel(ctx), imageID, root)
	close(e.done)
	s.mu.Lock()
	delete(s.inflight, root)
	s.mu.Unlock()
	return e.err
}

func (s *Store) extract(ctx context.Context, imageID, root string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	created, err := s.docker.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image: imageID,
			// Never started: a command only because Docker wants one for
			// images that have none.
			Entrypoint: []string{"/image-volume-extract"},
			Labels:     map[string]string{LabelExtract: s.owner},
		},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		return fmt.Errorf("create a container to export: %w", err)
	}
	defer func() {
		_, _ = s.docker.ContainerRemove(context.WithoutCancel(ctx), created.ID, client.ContainerRemoveOptions{Force: true})
	}()
	rc, err := s.docker.ContainerExport(ctx, created.ID, client.ContainerExportOptions{})
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer func() { _ = rc.Close() }()
	tmp, err := os.MkdirTemp(s.dir, ".extract-")
	if err != nil {
		return err
	}
	if err := Unpack(rc, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("unpack: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, root); err != nil {
		_ = os.RemoveAll(tmp)
		if _, statErr := os.Stat(root); statErr == nil {
			return nil // another shim process finished first
		}
		return err
	}
	return nil
}

// Unpack writes the tar stream r under dir: directories, regular files,
// symbolic and hard links with their modes, owners and times. Names are
// taken relative to dir; one that would leave it is an error, as is a hard
// link to outside. Device nodes, FIFOs and sockets are skipped (an image
// volume is data).
func Unpack(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	type dirTime struct {
		path string
		t    time.Time
	}
	var dirs []dirTime
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		rel, err := inside(h.Name)
		if err != nil {
			return err
		}
		if rel == "." {
			continue
		}
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		// A parent replaced by a link in an earlier entry must not redirect
		// this one.
		if err := noLinkParents(dir, rel); err != nil {
			return err
		}
		mode := os.FileMode(h.Mode).Perm()
		if h.Mode&0o4000 != 0 {
			mode |= os.ModeSetuid
		}
		if h.Mode&0o2000 != 0 {
			mode |= os.ModeSetgid
		}
		if h.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(p, 0o755); err != nil && !os.IsExist(err) {
				return err
			}
			dirs = append(dirs, dirTime{p, h.ModTime})
		case tar.TypeReg:
			_ = os.Remove(p)
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				_ = f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = os.Remove(p)
			// The target is kept as written: inside the container it
			// resolves against the mount, and the shim never follows it.
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		case tar.TypeLink:
			target, err := inside(h.Linkname)
			if err != nil {
				return err
			}
			if err := noLinkParents(dir, target); err != nil {
				return err
			}
			_ = os.Remove(p)
			if err := os.Link(filepath.Join(dir, target), p); err != nil {
				return err
			}
		default:
			continue
		}
		if err := os.Lchown(p, h.Uid, h.Gid); err != nil && !errors.Is(err, os.ErrPermission) {
			return err
		}
		if h.Typeflag != tar.TypeSymlink {
			if err := os.Chmod(p, mode); err != nil {
				return err
			}
			if h.Typeflag != tar.TypeDir {
				_ = os.Chtimes(p, h.ModTime, h.ModTime)
			}
		}
	}
	// Directory times last: their entries changed them.
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Chtimes(dirs[i].path, dirs[i].t, dirs[i].t)
	}
	return nil
}

// inside returns name relative to the archive's root, or an error when it
// would leave it.
func inside(name string) (string, error) {
	clean := filepath.Clean("/" + name)
	rel := strings.TrimPrefix(clean, "/")
	if rel == "" {
		return ".", nil
	}
	if strings.Contains(name, "..") {
		// Clean resolved every "..": refuse names that needed it, as no
		// exported image writes them.
		for _, part := range strings.Split(name, "/") {
			if part == ".." {
				return "", fmt.Errorf("archive entry %q leaves the image root", name)
			}
		}
	}
	return rel, nil
}

// noLinkParents fails when a directory on the way from dir to rel is a
// symbolic link.
func noLinkParents(dir, rel string) error {
	parts := strings.Split(rel, "/")
	p := dir
	for _, part := range parts[:len(parts)-1] {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("archive entry %q is below the symbolic link %s", rel, strings.TrimPrefix(p, dir+"/"))
		}
	}
	return nil
}
