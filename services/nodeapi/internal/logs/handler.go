package logs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	criapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
	crilogs "k8s.io/cri-client/pkg/logs"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/services/nodeapi/internal/pods"
)

// The kubelet's bodies for requests it refuses before looking at the pod;
// clients match them verbatim, JSON-looking text in a plain-text answer
// included.
const (
	msgMissingPod       = `{"message": "Missing podID."}`
	msgMissingContainer = `{"message": "Missing container name."}`
	msgMissingNamespace = `{"message": "Missing podNamespace."}`
	msgBadQuery         = `{"message": "Unable to decode query."}`
	msgInvalidOptions   = `{"message": "Invalid request."}`
)

// Option changes a setting of the handler NewHandler returns.
type Option func(*handler)

// WithLogger sets where refused requests and failed reads are logged; the
// CRI log reader's own messages go there too. The default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(h *handler) {
		if l != nil {
			h.log = l
		}
	}
}

// WithClock sets the clock sinceSeconds counts back from (tests pin it).
func WithClock(c clock.PassiveClock) Option {
	return func(h *handler) {
		if c != nil {
			h.clock = c
		}
	}
}

// WithSplitStreams turns on what the kubelet's PodLogsQuerySplitStreams
// feature gate (alpha, off by default in 1.36) turns on: stream=Stdout or
// stream=Stderr returns that stream alone. Off, as in a default kubelet,
// any stream but All is refused with 400.
func WithSplitStreams(enabled bool) Option {
	return func(h *handler) { h.splitStreams = enabled }
}

type handler struct {
	pods         pods.Getter
	rt           criapi.RuntimeService
	log          *slog.Logger
	clock        clock.PassiveClock
	splitStreams bool
}

// NewHandler returns the handler of GET
// /containerLogs/{namespace}/{pod}/{container}: it reads the three path
// values with r.PathValue, so it must be registered with a ServeMux pattern
// naming them; any method but GET gets the kubelet's 405. Pods come from
// pods, container log paths and states from the CRI runtime rt.
func NewHandler(p pods.Getter, rt criapi.RuntimeService, opts ...Option) http.Handler {
	h := &handler{pods: p, rt: rt, log: slog.Default(), clock: clock.RealClock{}}
	for _, o := range opts {
		o(h)
	}
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		// A "GET /..." ServeMux pattern routes HEAD here too; the
		// kubelet's route is GET alone (and a HEAD with follow would
		// hold the connection until the container exits).
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, http.StatusMethodNotAllowed, "405: Method Not Allowed")
		return
	}
	ns, podName, name := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	log := h.log.With("namespace", ns, "pod", podName, "container", name)
	refuse := func(code int, msg string, err error) {
		attrs := []any{"status", code, "message", msg}
		if err != nil {
			attrs = append(attrs, "err", err)
		}
		log.Info("container logs refused", attrs...)
		writeError(w, code, msg)
	}
	switch {
	case podName == "":
		refuse(http.StatusBadRequest, msgMissingPod, nil)
		return
	case name == "":
		refuse(http.StatusBadRequest, msgMissingContainer, nil)
		return
	case ns == "":
		refuse(http.StatusBadRequest, msgMissingNamespace, nil)
		return
	}

	opts, err := decodeOptions(r.URL.Query(), h.splitStreams)
	if err != nil {
		refuse(http.StatusBadRequest, msgBadQuery, err)
		return
	}
	if errs := validateOptions(opts); len(errs) > 0 {
		refuse(http.StatusUnprocessableEntity, msgInvalidOptions, errs.ToAggregate())
		return
	}

	ctx := r.Context()
	pod, err := h.pods.Get(ctx, ns, podName)
	switch {
	case errors.Is(err, pods.ErrNotFound):
		refuse(http.StatusNotFound, fmt.Sprintf("pod %q does not exist", podName), err)
		return
	case err != nil:
		// The kubelet holds its pods in memory; ours are a call away.
		refuse(http.StatusServiceUnavailable, fmt.Sprintf("unable to look up pod %q: %v", podName, err), err)
		return
	}
	if !inSpec(pod, name) {
		refuse(http.StatusNotFound, fmt.Sprintf("container %q not found in pod %q", name, podName), nil)
		return
	}
	if !canFlush(w) {
		refuse(http.StatusInternalServerError, fmt.Sprintf("unable to convert %T into http.Flusher, cannot show logs", w), nil)
		return
	}

	out := newStreamWriter(w, opts.Follow)
	stdout, stderr, err := h.outputs(opts, out)
	if err != nil {
		refuse(http.StatusBadRequest, err.Error(), nil)
		return
	}

	w.Header().Set("Transfer-Encoding", "chunked")
	err = h.read(klog.NewContext(ctx, logr.FromSlogHandler(log.Handler())), log, pod, name, opts, stdout, stderr)
	if ferr := out.flush(); err == nil {
		err = ferr
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		log.Debug("container logs: client went away", "err", err)
	case out.started:
		// The 200 and part of the log are out already; the kubelet's
		// late error ends up appended to the body, so the client sees
		// why the log stopped.
		log.Warn("container logs: read failed while streaming", "err", err)
		_, _ = io.WriteString(w, err.Error())
	default:
		refuse(http.StatusBadRequest, err.Error(), nil)
	}
}

// outputs maps the requested stream onto the CRI reader's two writers; a
// nil writer drops that stream.
func (h *handler) outputs(opts *corev1.PodLogOptions, out io.Writer) (stdout, stderr io.Writer, err error) {
	if !h.splitStreams {
		if opts.Stream != nil && *opts.Stream != corev1.LogStreamAll {
			return nil, nil, fmt.Errorf("unable to return the given log stream: %q. Please enable PodLogsQuerySplitStreams feature gate in kubelet", *opts.Stream)
		}
		return out, out, nil
	}
	stream := corev1.LogStreamAll
	if opts.Stream != nil {
		stream = *opts.Stream
	}
	switch stream {
	case corev1.LogStreamStdout:
		return out, nil, nil
	case corev1.LogStreamStderr:
		return nil, out, nil
	case corev1.LogStreamAll:
		return out, out, nil
	default:
		return nil, nil, fmt.Errorf("invalid stream type %q", stream)
	}
}

// read streams the selected container's log. Errors before the first
// write become a 400; the container-state ones come from selectContainer.
func (h *handler) read(ctx context.Context, log *slog.Logger, pod *corev1.Pod, name string, opts *corev1.PodLogOptions, stdout, stderr io.Writer) error {
	raw, err := selectContainer(pod, name, opts.Previous)
	if err != nil {
		return err
	}
	id, ok := parseContainerID(raw)
	if !ok {
		log.Warn("container logs: unparsable container ID in pod status", "containerID", raw)
	}
	if stdout != nil {
		// Send the status line and headers now: a follow of a quiet
		// container must not leave the client waiting for them.
		if _, err := stdout.Write(nil); err != nil {
			return err
		}
	}
	resp, err := h.rt.ContainerStatus(ctx, id.id, false)
	if err != nil {
		log.Debug("container logs: container status", "containerID", id.String(), "err", err)
		return fmt.Errorf("unable to retrieve container logs for %v", id)
	}
	st := resp.GetStatus()
	if st == nil {
		return remote.ErrContainerStatusNil
	}
	return crilogs.ReadLogs(ctx, st.GetLogPath(), id.id, criOptions(opts, h.clock.Now()), h.rt, stdout, stderr)
}

// streamWriter writes the log into the response. The first write, even an
// empty one, is flushed at once so the status and headers go out. After
// that, in follow mode every write is flushed so each line reaches the
// client as it is logged; a plain read is buffered into large chunks
// instead, flushed at the end: the same bytes, far fewer chunks and
// syscalls (the kubelet flushes every line either way).
type streamWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	buf     *bufio.Writer // nil when following
	started bool
}

// plainReadBuffer is the chunk size of plain reads.
const plainReadBuffer = 64 << 10

func newStreamWriter(w http.ResponseWriter, follow bool) *streamWriter {
	s := &streamWriter{w: w, rc: http.NewResponseController(w)}
	if !follow {
		s.buf = bufio.NewWriterSize(w, plainReadBuffer)
	}
	return s
}

func (s *streamWriter) Write(p []byte) (int, error) {
	if s.started && s.buf != nil {
		return s.buf.Write(p)
	}
	s.started = true
	n, err := s.w.Write(p)
	if err != nil {
		return n, err
	}
	return n, s.rc.Flush()
}

// flush sends what a plain read has buffered.
func (s *streamWriter) flush() error {
	if s.buf == nil || s.buf.Buffered() == 0 {
		return nil
	}
	if err := s.buf.Flush(); err != nil {
		return err
	}
	return s.rc.Flush()
}

// canFlush reports whether w, or a writer it wraps, can flush, the way
// http.ResponseController looks for it.
func canFlush(w http.ResponseWriter) bool {
	for {
		switch t := w.(type) {
		case interface{ FlushError() error }, http.Flusher:
			return true
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return false
		}
	}
}

// writeError answers as the kubelet's REST framework does: the status and
// the message as the whole body, its type left to net/http (which sniffs
// text/plain, or sends none once Transfer-Encoding is set).
func writeError(w http.ResponseWriter, code int, msg string) {
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg)
}
