// Package statusreport is podsyncd's side of the status manager: it hands
// statusd each pod's newest status and, once the pod's resources are
// released, the reclaim report. statusd runs in its own process and can be
// down for a moment (restarted, upgraded, killed), which the kubelet's
// in-process status manager never is; what statusd could not take is kept,
// the newest status per pod, and resent with backoff until it does. A pod
// that is synced again sends its status again anyway, but a finished pod
// is not synced again: without the resend its last status (and so its
// deletion from the API) would be lost. A status statusd refuses as invalid
// is held back until it changes (refusals).
package statusreport
