package sources

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/internal/podsource"
	"github.com/microlet/microlet/services/podconfig/internal/manifest"
)

// HTTP is the manifest URL source.
type HTTP struct {
	// URL serves a Pod or a PodList.
	URL string
	// Header is sent with every request.
	Header http.Header
	// NodeName is this node's name.
	NodeName string
	// Period is the polling interval.
	Period time.Duration
	// Timeout bounds one request; 10 s when zero.
	Timeout time.Duration
	// Clock drives the polling; the real clock when nil.
	Clock clock.WithTicker
	// Client makes the requests; a plain client when nil.
	Client *http.Client
	// Log receives one line per problem.
	Log *slog.Logger
	// Report hears about problems; optional.
	Report Reporter

	last []byte
}

// Run polls the URL until ctx ends.
func (h *HTTP) Run(ctx context.Context, sink Sink) error {
	if h.Clock == nil {
		h.Clock = clock.RealClock{}
	}
	if h.Log == nil {
		h.Log = slog.Default()
	}
	if h.Report == nil {
		h.Report = nopReporter{}
	}
	if h.Period <= 0 {
		h.Period = 20 * time.Second
	}
	if h.Timeout <= 0 {
		h.Timeout = 10 * time.Second
	}
	if h.Client == nil {
		h.Client = &http.Client{}
	}
	ticker := h.Clock.NewTicker(h.Period)
	defer ticker.Stop()
	failures := 0
	for {
		if err := h.poll(ctx, sink); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			h.Report.Error(podsource.HTTPSource, h.URL, err)
			// The first failures are worth a line each; a URL that stays down
			// is only mentioned every 15th poll.
			if failures < 3 || failures%15 == 0 {
				h.Log.Warn("cannot read pods from manifest URL; keeping the last good set", "url", h.URL, "err", err)
			}
			failures++
		} else {
			if failures > 0 {
				h.Log.Info("manifest URL readable again", "url", h.URL)
			}
			failures = 0
			h.Report.OK(podsource.HTTPSource)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

func (h *HTTP) poll(ctx context.Context, sink Sink) error {
	rctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, h.URL, nil)
	if err != nil {
		return err
	}
	for k, vs := range h.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := h.Client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, manifest.MaxSize+1))
	if err != nil {
		return fmt.Errorf("reading body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", h.URL, resp.Status)
	}
	if len(data) > manifest.MaxSize {
		return manifest.ErrTooLarge
	}
	if len(data) == 0 {
		// Nothing to run, but the source has answered: an empty set.
		h.last = nil
		sink(podsource.HTTPSource, []*corev1.Pod{})
		return errors.New("empty body")
	}
	if bytes.Equal(data, h.last) {
		return nil
	}
	// Remember the body before parsing, like upstream, so a bad body is
	// reported once per change rather than re-parsed every poll.
	h.last = data
	pods, err := manifest.ParsePods(data, manifest.Source{NodeName: h.NodeName, Location: h.URL})
	if err != nil {
		return fmt.Errorf("body is not a valid Pod or PodList: %w", err)
	}
	sink(podsource.HTTPSource, pods)
	return nil
}
