package streams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/proxy"
	translator "k8s.io/apiserver/pkg/util/proxy"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	remotecommandserver "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	"github.com/microlet/microlet/internal/podutil"
	"github.com/microlet/microlet/services/nodeapi/internal/pods"
	"github.com/microlet/microlet/services/nodeapi/internal/runtimepods"
)

// Handlers serves the streaming endpoints.
type Handlers struct {
	pods       pods.Getter
	rt         criapi.RuntimeService
	log        *slog.Logger
	runTimeout time.Duration
}

// Option configures Handlers.
type Option func(*Handlers)

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(h *Handlers) { h.log = l } }

// WithRunTimeout bounds a /run command; 0 (the kubelet's behaviour) means
// only the client's going away ends it.
func WithRunTimeout(d time.Duration) Option { return func(h *Handlers) { h.runTimeout = d } }

// New returns the handlers over the node's pods and the CRI runtime.
func New(p pods.Getter, rt criapi.RuntimeService, opts ...Option) *Handlers {
	h := &Handlers{pods: p, rt: rt, log: slog.Default()}
	for _, o := range opts {
		o(h)
	}
	return h
}

// Path values the routes must provide: {namespace}, {pod}, optionally {uid},
// and {container} for all but port-forward.
const (
	PathNamespace = "namespace"
	PathPod       = "pod"
	PathUID       = "uid"
	PathContainer = "container"
)

// Exec serves GET/POST /exec/{namespace}/{pod}[/{uid}]/{container}?command=...
func (h *Handlers) Exec() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.remoteCommand(w, r, false) })
}

// Attach serves GET/POST /attach/{namespace}/{pod}[/{uid}]/{container}.
func (h *Handlers) Attach() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.remoteCommand(w, r, true) })
}

func (h *Handlers) remoteCommand(w http.ResponseWriter, r *http.Request, attach bool) {
	ctx := r.Context()
	streamOpts, err := remotecommandserver.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ns, name, uid, cname := r.PathValue(PathNamespace), r.PathValue(PathPod), types.UID(r.PathValue(PathUID)), r.PathValue(PathContainer)
	pod, ok := h.pod(w, r, ns, name)
	if !ok {
		return
	}
	fullName := podFullName(name, ns)
	c, err := h.findContainer(ctx, ns, name, uid, cname)
	if err != nil {
		_ = streaming.WriteError(err, w)
		return
	}
	var loc *url.URL
	if attach {
		if c == nil {
			_ = streaming.WriteError(fmt.Errorf("container %s not found in pod %s", cname, fullName), w)
			return
		}
		if uid != "" && pod.UID != uid {
			_ = streaming.WriteError(fmt.Errorf("pod %s not found", fullName), w)
			return
		}
		spec := podutil.FindContainer(pod, cname, true)
		if spec == nil {
			_ = streaming.WriteError(fmt.Errorf("container %s not found in pod %s", cname, fullName), w)
			return
		}
		resp, aerr := h.rt.Attach(ctx, &runtimeapi.AttachRequest{
			ContainerId: c.ID, Stdin: streamOpts.Stdin, Stdout: streamOpts.Stdout, Stderr: streamOpts.Stderr, Tty: spec.TTY,
		})
		if aerr != nil {
			_ = streaming.WriteError(aerr, w)
			return
		}
		loc, err = url.Parse(resp.GetUrl())
	} else {
		if c == nil {
			_ = streaming.WriteError(fmt.Errorf("container not found (%q)", cname), w)
			return
		}
		resp, eerr := h.rt.Exec(ctx, &runtimeapi.ExecRequest{
			ContainerId: c.ID, Cmd: r.URL.Query()[corev1.ExecCommandParam],
			Stdin: streamOpts.Stdin, Stdout: streamOpts.Stdout, Stderr: streamOpts.Stderr, Tty: streamOpts.TTY,
		})
		if eerr != nil {
			_ = streaming.WriteError(eerr, w)
			return
		}
		loc, err = url.Parse(resp.GetUrl())
	}
	if err != nil {
		h.internal(w, "parse the runtime's streaming URL", err)
		return
	}
	var handler http.Handler = proxy.NewUpgradeAwareHandler(loc, nil, false, true, h.responder())
	if wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		handler = translator.NewStreamTranslatorHandler(loc, nil, 0, translator.Options{
			Stdin: streamOpts.Stdin, Stdout: streamOpts.Stdout, Stderr: streamOpts.Stderr, Tty: streamOpts.TTY,
		})
	}
	handler.ServeHTTP(w, r)
}

// PortForward serves GET/POST /portForward/{namespace}/{pod}[/{uid}].
func (h *Handlers) PortForward() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		tunnel := wsstream.IsWebSocketRequestWithTunnelingProtocol(r)
		opts := &portforward.V4Options{}
		if !tunnel {
			var err error
			if opts, err = portforward.NewV4Options(r); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		ns, name, uid := r.PathValue(PathNamespace), r.PathValue(PathPod), types.UID(r.PathValue(PathUID))
		pod, ok := h.pod(w, r, ns, name)
		if !ok {
			return
		}
		if uid != "" && pod.UID != uid {
			http.Error(w, "pod not found", http.StatusNotFound)
			return
		}
		all, err := runtimepods.List(ctx, h.rt)
		if err != nil {
			_ = streaming.WriteError(err, w)
			return
		}
		rp := all.Find(ns, name, pod.UID)
		if rp == nil || len(rp.SandboxIDs) == 0 {
			_ = streaming.WriteError(fmt.Errorf("pod not found (%q)", podFullName(name, ns)), w)
			return
		}
		resp, err := h.rt.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: rp.SandboxIDs[0], Port: opts.Ports})
		if err != nil {
			_ = streaming.WriteError(err, w)
			return
		}
		loc, err := url.Parse(resp.GetUrl())
		if err != nil {
			h.internal(w, "parse the runtime's streaming URL", err)
			return
		}
		var handler http.Handler = proxy.NewUpgradeAwareHandler(loc, nil, false, true, h.responder())
		if tunnel {
			handler = translator.NewTunnelingHandler(handler)
		}
		handler.ServeHTTP(w, r)
	})
}

// Run serves POST /run/{namespace}/{pod}[/{uid}]/{container}?cmd=...: the
// command's combined output, synchronously.
func (h *Handlers) Run() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		ns, name, uid, cname := r.PathValue(PathNamespace), r.PathValue(PathPod), types.UID(r.PathValue(PathUID)), r.PathValue(PathContainer)
		if _, ok := h.pod(w, r, ns, name); !ok {
			return
		}
		c, err := h.findContainer(ctx, ns, name, uid, cname)
		if err == nil && c == nil {
			err = fmt.Errorf("container not found (%q)", cname)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		cmd := strings.Split(r.URL.Query().Get("cmd"), " ")
		stdout, stderr, err := h.rt.ExecSync(ctx, c.ID, cmd, h.runTimeout)
		out := append(stdout, stderr...)
		if err != nil {
			http.Error(w, fmt.Sprintf("%v: %s", err, out), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	})
}

// pod finds the pod this node runs, answering 404 "pod does not exist" (the
// kubelet's words) or 500 itself when it cannot.
func (h *Handlers) pod(w http.ResponseWriter, r *http.Request, ns, name string) (*corev1.Pod, bool) {
	pod, err := h.pods.Get(r.Context(), ns, name)
	switch {
	case errors.Is(err, pods.ErrNotFound):
		http.Error(w, "pod does not exist", http.StatusNotFound)
		return nil, false
	case err != nil:
		h.internal(w, "look up pod", err)
		return nil, false
	}
	return pod, true
}

// findContainer returns the running container, nil when it is not running.
func (h *Handlers) findContainer(ctx context.Context, ns, name string, uid types.UID, container string) (*runtimepods.Container, error) {
	all, err := runtimepods.List(ctx, h.rt)
	if err != nil {
		return nil, err
	}
	return all.Find(ns, name, uid).Container(container), nil
}

func (h *Handlers) internal(w http.ResponseWriter, what string, err error) {
	h.log.Error("streaming request failed", "step", what, "err", err)
	http.Error(w, fmt.Sprintf("%s: %v", what, err), http.StatusInternalServerError)
}

func (h *Handlers) responder() proxy.ErrorResponder { return responder{h.log} }

type responder struct{ log *slog.Logger }

// Error implements proxy.ErrorResponder.
func (r responder) Error(w http.ResponseWriter, _ *http.Request, err error) {
	r.log.Error("proxying a stream to the runtime failed", "err", err)
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

func podFullName(name, namespace string) string { return name + "_" + namespace }
