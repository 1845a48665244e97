package setters

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
)

// ReadyErrors holds the reasons other components give for the node not
// being ready, as the kubelet's Ready setter joins its managers' errors
// (the node shutdown manager's "node is shutting down" among them). Each
// reporter's latest report replaces its earlier one.
type ReadyErrors struct {
	mu      sync.Mutex
	byRep   map[string][]string
	changed func()
}

// NewReadyErrors returns an empty store; onChange (may be nil) is called
// after a report that changed something, so the status is pushed at once.
func NewReadyErrors(onChange func()) *ReadyErrors {
	return &ReadyErrors{byRep: map[string][]string{}, changed: onChange}
}

// Report replaces reporter's errors; none clears them. It refuses an empty
// reporter and an empty error, naming the field, and reports whether
// anything changed.
func (r *ReadyErrors) Report(reporter string, errs []string) (bool, error) {
	if reporter == "" {
		return false, errors.New("reporter: must not be empty")
	}
	for i, e := range errs {
		if e == "" {
			return false, fmt.Errorf("errors[%d]: must not be empty", i)
		}
	}
	r.mu.Lock()
	old := r.byRep[reporter]
	same := slices.Equal(old, errs)
	if len(errs) == 0 {
		delete(r.byRep, reporter)
	} else {
		r.byRep[reporter] = slices.Clone(errs)
	}
	cb := r.changed
	r.mu.Unlock()
	if !same && cb != nil {
		cb()
	}
	return !same, nil
}

// Errors returns every reported error, ordered by reporter.
func (r *ReadyErrors) Errors() []error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	reps := make([]string, 0, len(r.byRep))
	for k := range r.byRep {
		reps = append(reps, k)
	}
	sort.Strings(reps)
	var out []error
	for _, k := range reps {
		for _, e := range r.byRep[k] {
			out = append(out, errors.New(e))
		}
	}
	return out
}
