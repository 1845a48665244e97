package sources

import (
	corev1 "k8s.io/api/core/v1"
)

// Sink receives the full current set of a source. The pods are only read by
// the sink and may be handed in again later, but never modified once handed
// in: a changed pod is a new object (the merge relies on this to skip
// unchanged pods cheaply).
type Sink func(source string, pods []*corev1.Pod)

// Reporter hears about a source's problems and recoveries.
type Reporter interface {
	// Error reports a problem; where names the file, URL or API.
	Error(source, where string, err error)
	// OK says the source read its input cleanly.
	OK(source string)
}

type nopReporter struct{}

func (nopReporter) Error(string, string, error) {}
func (nopReporter) OK(string)                   {}
