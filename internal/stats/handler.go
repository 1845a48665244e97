package stats

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// SummaryHandler serves the kubelet's /stats/summary: the Summary as JSON
// on GET or POST (the kubelet routes both), only CPU and memory when the
// query or form holds exactly one only_cpu_and_memory=true. A failed
// Summary is a 500 "Internal Error: ..." as the kubelet answers; other
// methods get 405. The caller mounts it at /stats/summary behind
// authentication and authorization (nodes/stats).
func SummaryHandler(p *Provider) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodPost {
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, "405: Method Not Allowed", http.StatusMethodNotAllowed)
			return
		}
		if err := r.ParseForm(); err != nil {
			internalError(p, w, fmt.Errorf("parse form failed: %w", err))
			return
		}
		v, found := r.Form["only_cpu_and_memory"]
		only := found && len(v) == 1 && v[0] == "true"
		s, err := p.Summary(r.Context(), only)
		if err != nil {
			internalError(p, w, err)
			return
		}
		// Indented with one space, as the kubelet's REST container
		// pretty-prints every answer.
		b, err := json.MarshalIndent(s, "", " ")
		if err != nil {
			internalError(p, w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if _, err := w.Write(b); err != nil {
			p.log.Debug("writing /stats/summary", "err", err)
		}
	})
}

func internalError(p *Provider, w http.ResponseWriter, err error) {
	p.log.Error("HTTP InternalServerError serving /stats/summary", "err", err)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusInternalServerError)
	_, _ = fmt.Fprintf(w, "Internal Error: %v", err)
}
