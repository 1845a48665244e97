package registry

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/microlet/microlet/internal/testenv"
)

// Repositories pushed by Start.
const (
	// Busybox is the default container image: busybox applets, `sh` as command.
	Busybox = "microlet/busybox:1.0"
	// WebServer runs busybox httpd on port 80, serving WebServerPage at "/".
	WebServer = "microlet/httpd:1.0"
)

// WebServerPage is the body the web-server image serves. It contains the
// phrase critest's port-forward and host-port specs look for.
const WebServerPage = "<html><body><h1>Welcome to nginx!</h1><p>microlet test web server (busybox httpd)</p></body></html>\n"

// WebServerCmd is the web-server image's command: it logs a line naming
// httpd, then serves /www on port 80 in the foreground.
var WebServerCmd = []string{"sh", "-c", "echo httpd: serving /www on :80; exec httpd -f -v -p 80 -h /www"}

// LabelRegistry is set on every image's config to the registry's host:port.
const LabelRegistry = "io.microlet.test-registry"

// BusyboxPath is where Debian's busybox-static installs the binary.
const BusyboxPath = "/bin/busybox"

// Registry is a running local registry.
type Registry struct {
	host string
	auth authn.Authenticator // the private registry's credentials
	srv  *http.Server
	done chan struct{}
}

// Host is host:port of the registry.
func (r *Registry) Host() string { return r.host }

// Image is the full reference of a repository:tag in this registry.
func (r *Registry) Image(repoTag string) string { return r.host + "/" + repoTag }

// Start starts a registry with the Busybox and WebServer images, stopped
// by t.Cleanup. It skips the test when busybox-static is not installed,
// unless MICROLET_REQUIRE_CONTROLPLANE=1 asks for every dependency.
func Start(t testing.TB) *Registry {
	t.Helper()
	if _, err := os.Stat(BusyboxPath); err != nil {
		testenv.RequireOrSkip(t, "registry: %s missing (apt-get install busybox-static): %v", BusyboxPath, err)
	}
	r, err := New(context.Background())
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// New starts a registry on 127.0.0.1 with the Busybox and WebServer images.
func New(ctx context.Context) (*Registry, error) {
	r, err := serve(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	if err != nil {
		return nil, err
	}
	base, err := baseImage(r.host)
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	bb, err := withConfig(base, func(c *v1.Config) { c.Cmd = []string{"sh"} })
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	web, err := withConfig(base, func(c *v1.Config) {
		c.Cmd = WebServerCmd
		c.ExposedPorts = map[string]struct{}{"80/tcp": {}}
	})
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	for ref, img := range map[string]v1.Image{Busybox: bb, WebServer: web} {
		if err := r.Push(ctx, ref, img); err != nil {
			_ = r.Close()
			return nil, err
		}
	}
	return r, nil
}

// Remote is a handle on a registry another process serves at host
// (host:port, plain HTTP), for Push and Image; Close does nothing.
func Remote(host string) *Registry { return &Registry{host: host} }

// Serve runs an empty plain-HTTP registry on addr until ctx ends: a
// make cluster cluster's registry, which the nodes' containerd uses as
// registry.k8s.io's mirror.
func Serve(ctx context.Context, addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	r := newServer(lis, ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	<-ctx.Done()
	return r.Close()
}

// serve starts an HTTP registry on a free loopback port.
func serve(h http.Handler) (*Registry, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return newServer(lis, h), nil
}

func newServer(lis net.Listener, h http.Handler) *Registry {
	r := &Registry{
		host: lis.Addr().String(),
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second},
		done: make(chan struct{}),
	}
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(lis)
	}()
	return r
}

// Private is the repository:tag of the busybox image a private registry
// (StartPrivate) holds.
const Private = "private/busybox:1.0"

// StartPrivate starts a second registry that answers only requests with
// HTTP basic auth user:password (else 401 with a Basic challenge and
// Docker's UNAUTHORIZED error), holding the busybox image as Private;
// stopped by t.Cleanup. It skips as Start does.
func StartPrivate(t testing.TB, user, password string) *Registry {
	t.Helper()
	if _, err := os.Stat(BusyboxPath); err != nil {
		testenv.RequireOrSkip(t, "registry: %s missing (apt-get install busybox-static): %v", BusyboxPath, err)
	}
	inner := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	r, err := serve(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, p, ok := req.BasicAuth(); ok && u == user && p == password {
			inner.ServeHTTP(w, req)
			return
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="microlet-test"`)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
	}))
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	r.auth = &authn.Basic{Username: user, Password: password}
	base, err := baseImage(r.host)
	if err == nil {
		var img v1.Image
		if img, err = withConfig(base, func(c *v1.Config) { c.Cmd = []string{"sh"} }); err == nil {
			err = r.Push(context.Background(), Private, img)
		}
	}
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	return r
}

// Push writes img to this registry as repoTag.
func (r *Registry) Push(ctx context.Context, repoTag string, img v1.Image) error {
	ref, err := name.ParseReference(r.Image(repoTag), name.Insecure)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	opts := []remote.Option{remote.WithContext(ctx)}
	if r.auth != nil {
		opts = append(opts, remote.WithAuth(r.auth))
	}
	if err := remote.Write(ref, img, opts...); err != nil {
		return fmt.Errorf("registry: push %s: %w", repoTag, err)
	}
	return nil
}

// Close stops the registry (a Remote one is left alone).
func (r *Registry) Close() error {
	if r.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := r.srv.Shutdown(ctx)
	<-r.done
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

var (
	layerOnce sync.Once
	layer     v1.Layer
	layerErr  error
)

// busyboxLayer is one layer with busybox, a symlink per applet, users and
// groups for the security-context specs, and the web server's page.
func busyboxLayer() (v1.Layer, error) {
	layerOnce.Do(func() {
		var data []byte
		data, layerErr = os.ReadFile(BusyboxPath)
		if layerErr != nil {
			return
		}
		var out []byte
		out, layerErr = exec.Command(BusyboxPath, "--list").Output()
		if layerErr != nil {
			layerErr = fmt.Errorf("busybox --list: %w", layerErr)
			return
		}
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		mtime := time.Unix(0, 0)
		dir := func(p string, mode int64) {
			_ = tw.WriteHeader(&tar.Header{Name: p + "/", Mode: mode, Typeflag: tar.TypeDir, ModTime: mtime})
		}
		file := func(p string, mode int64, b []byte) {
			_ = tw.WriteHeader(&tar.Header{Name: p, Mode: mode, Size: int64(len(b)), Typeflag: tar.TypeReg, ModTime: mtime})
			_, _ = tw.Write(b)
		}
		for _, d := range []string{"bin", "etc", "home", "root", "tmp", "var", "var/www", "www", "proc", "sys", "dev", "usr", "usr/bin", "usr/sbin", "sbin", "run", "var/run"} {
			mode := int64(0o755)
			if d == "tmp" {
				mode = 0o1777
			}
			dir(d, mode)
		}
		file("bin/busybox", 0o755, data)
		// Applets are hard links, not symlinks: masking one path (critest
		// masks /bin/ls) must not mask busybox itself.
		for _, a := range strings.Fields(string(out)) {
			if a == "busybox" {
				continue
			}
			_ = tw.WriteHeader(&tar.Header{Name: "bin/" + a, Linkname: "bin/busybox", Typeflag: tar.TypeLink, Mode: 0o755, ModTime: mtime})
		}
		file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n"+
			"www-data:x:33:33:www-data:/var/www:/bin/sh\n"+
			"default-user:x:1000:1000:default-user:/home:/bin/sh\n"+
			"nobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"))
		file("etc/group", 0o644, []byte("root:x:0:\nusers:x:100:\nwww-data:x:33:\n"+
			"default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\nnogroup:x:65534:\n"))
		file("www/index.html", 0o644, []byte(WebServerPage))
		// A stand-in for nginx: a script, so the process is named "nginx"
		// (critest looks for it with pidof) and writes nginx's pid file.
		// Started as "nginx master process" so its command line carries the
		// words critest greps /proc/1/cmdline for.
		file("usr/sbin/nginx", 0o755, []byte("#!/bin/sh\necho $$ > /var/run/nginx.pid\necho nginx: serving on :80\nhttpd -f -v -p 80 -h /www\n"))
		// Applets Debian's busybox-static lacks, as small scripts.
		file("usr/bin/pgrep", 0o755, []byte("#!/bin/sh\n# pgrep stand-in: PIDs whose command name contains $1.\n"+
			"for d in /proc/[0-9]*; do\n  read -r comm < \"$d/comm\" 2>/dev/null || continue\n"+
			"  case \"$comm\" in *\"$1\"*) echo \"${d#/proc/}\";; esac\ndone\n"))
		file("usr/bin/ipcs", 0o755, []byte("#!/bin/sh\n# ipcs stand-in: the IPC namespace's shared memory segments.\ncat /proc/sysvipc/shm\n"))
		if err := tw.Close(); err != nil {
			layerErr = err
			return
		}
		b := buf.Bytes()
		layer, layerErr = tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	})
	return layer, layerErr
}

func baseImage(host string) (v1.Image, error) {
	l, err := busyboxLayer()
	if err != nil {
		return nil, fmt.Errorf("registry: busybox layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cf.Config.Labels = map[string]string{LabelRegistry: host}
	return mutate.ConfigFile(img, cf)
}

func withConfig(base v1.Image, edit func(*v1.Config)) (v1.Image, error) {
	cf, err := base.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	edit(&cf.Config)
	return mutate.ConfigFile(base, cf)
}

// DockerImageFilter is the label filter (key=value) matching every image
// Docker pulled from this registry.
func (r *Registry) DockerImageFilter() string { return LabelRegistry + "=" + r.host }
