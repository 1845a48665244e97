package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/registry"
	"github.com/microlet/microlet/services/runtime-shim/internal/shimtest"
)

// statsPath matches Docker's stats endpoint, with or without the API
// version prefix.
var statsPath = regexp.MustCompile(`^(?:/v[0-9.]+)?/containers/([^/]+)/stats$`)

// dockerProxy sits between a shim and the real Docker socket and watches
// the stats calls going through: how many are in Docker's hands at once,
// how many were made per container, and the "read" time of the sample
// Docker answered. With a gate set it holds stats calls until that many
// are waiting (or a deadline passes), which proves they were made
// concurrently without measuring any time.
type dockerProxy struct {
	sock string
	srv  *http.Server

	mu       sync.Mutex
	cond     *sync.Cond
	inFlight int
	maxIn    int
	calls    map[string]int
	read     map[string]time.Time
	gate     int
	gateEnd  time.Time
}

func startDockerProxy(t testing.TB, env *shimtest.Env) *dockerProxy {
	t.Helper()
	target := env.Docker.DaemonHost()
	sockPath, ok := strings.CutPrefix(target, "unix://")
	if !ok {
		testenv.RequireOrSkip(t, "Docker at %s is not a unix socket", target)
	}
	p := &dockerProxy{sock: filepath.Join(env.Dir, fmt.Sprintf("dp%d.sock", time.Now().UnixNano()%1e6)), calls: map[string]int{}, read: map[string]time.Time{}}
	p.cond = sync.NewCond(&p.mu)
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker"
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sockPath)
		}},
		// Log following and the event stream must pass as they come.
		FlushInterval:  -1,
		ModifyResponse: p.recordRead,
	}
	ln, err := net.Listen("unix", p.sock)
	if err != nil {
		t.Fatal(err)
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m := statsPath.FindStringSubmatch(r.URL.Path); m != nil {
			p.enter(m[1])
			defer p.leave()
		}
		rp.ServeHTTP(w, r)
	}), ReadHeaderTimeout: time.Minute}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(func() { _ = p.srv.Close() })
	return p
}

func (p *dockerProxy) enter(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inFlight++
	p.maxIn = max(p.maxIn, p.inFlight)
	p.calls[id]++
	p.cond.Broadcast()
	for p.gate > 0 && p.inFlight < p.gate && time.Now().Before(p.gateEnd) {
		p.cond.Wait()
	}
	// Once open the gate stays open: the calls now go on to Docker.
	p.gate = 0
	p.cond.Broadcast()
}

func (p *dockerProxy) leave() {
	p.mu.Lock()
	p.inFlight--
	p.mu.Unlock()
}

// setGate makes the next stats calls wait until n of them are in flight;
// after 20 s they go on regardless (and the test sees fewer in flight),
// before the shim would give up on them.
func (p *dockerProxy) setGate(n int) {
	p.mu.Lock()
	p.gate, p.gateEnd, p.maxIn = n, time.Now().Add(20*time.Second), 0
	clear(p.calls)
	p.mu.Unlock()
	// Wake the waiters just after the deadline.
	time.AfterFunc(21*time.Second, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
}

// reset forgets the counts.
func (p *dockerProxy) reset() {
	p.mu.Lock()
	p.maxIn = 0
	clear(p.calls)
	p.mu.Unlock()
}

// counts returns the most stats calls in flight at once and the calls per
// container since the last reset or gate.
func (p *dockerProxy) counts() (maxInFlight int, calls map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	calls = make(map[string]int, len(p.calls))
	for k, v := range p.calls {
		calls[k] = v
	}
	return p.maxIn, calls
}

// readTime is the "read" time of the last stats sample Docker answered for
// the container.
func (p *dockerProxy) readTime(id string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.read[id]
}

func (p *dockerProxy) recordRead(resp *http.Response) error {
	m := statsPath.FindStringSubmatch(resp.Request.URL.Path)
	if m == nil || resp.StatusCode != http.StatusOK {
		return nil
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	var s struct {
		ID   string    `json:"id"`
		Read time.Time `json:"read"`
	}
	if json.Unmarshal(b, &s) == nil && s.ID != "" {
		p.mu.Lock()
		p.read[s.ID] = s.Read
		p.mu.Unlock()
	}
	return nil
}

// statsPod is a sandbox the stats tests made, with its containers.
type statsPod struct {
	config     *runtimeapi.PodSandboxConfig
	id         string
	containers []string
}

// runStatsPods starts pods of perPod busybox containers each; every
// container first writes a 2 MiB file into its writable layer, the ones
// for which busy(pod, container) burn some CPU, then all sleep. Sandboxes
// carry the label stats=<tag>, containers stats-test=<tag>. The pods are
// removed when the test ends.
func runStatsPods(t testing.TB, env *shimtest.Env, sh *shimtest.Shim, tag string, pods, perPod int, cgroupParent func(pod int) string, busy func(pod, ctr int) bool) []*statsPod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	image := env.Registry.Image(registry.Busybox)
	if _, err := sh.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}); err != nil {
		t.Fatal(err)
	}
	var out []*statsPod
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		for _, p := range out {
			_, _ = sh.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.id})
			_, _ = sh.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.id})
		}
	})
	for i := range pods {
		name := fmt.Sprintf("stats-%s-%d", tag, i)
		pc := &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "stats", Uid: name + "-uid"},
			Labels:   map[string]string{"stats": tag},
			Linux:    &runtimeapi.LinuxPodSandboxConfig{},
		}
		if cgroupParent != nil {
			pc.Linux.CgroupParent = cgroupParent(i)
		}
		sb, err := sh.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})
		if err != nil {
			t.Fatal(err)
		}
		p := &statsPod{config: pc, id: sb.PodSandboxId}
		out = append(out, p)
		for j := range perPod {
			script := "dd if=/dev/zero of=/stats-file bs=1M count=2 2>/dev/null; "
			if busy != nil && busy(i, j) {
				script += "dd if=/dev/zero of=/dev/null bs=64k count=20000 2>/dev/null; "
			}
			script += "exec sleep 3600"
			c, err := sh.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: p.id, SandboxConfig: pc, Config: &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: fmt.Sprintf("c%d", j)},
				Image:    &runtimeapi.ImageSpec{Image: image},
				Command:  []string{"sh", "-c", script},
				Labels:   map[string]string{"stats-test": tag},
			}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sh.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
				t.Fatal(err)
			}
			p.containers = append(p.containers, c.ContainerId)
		}
	}
	return out
}

// removeCgroupDirs removes a cgroup parent Docker made under every
// controller (v1) or the unified tree (v2), once its containers are gone.
func removeCgroupDirs(parent string) {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", parent))
	dirs = append(dirs, filepath.Join("/sys/fs/cgroup", parent))
	for _, d := range dirs {
		_ = os.Remove(d)
	}
}
