// Package client follows podconfig's Watch stream for the services that act
// on the desired pods (podsyncd's desired store, statusd's mirror pods): the
// one implementation of the stream's client side, next to the service that
// serves it.
//
// Watcher decodes every message into an Event of typed pods and hands it to
// its Handle function, in order, one at a time. It keeps the sequence of the
// last message handled and resumes after it when the stream breaks, so a
// reconnect to the same podconfig process replays exactly what was missed
// and one to a restarted podconfig starts with a snapshot (Event.Resync).
// Reconnects back off exponentially through k8s.io/apimachinery's
// wait.Backoff: the delay grows while podconfig is away and starts over
// after a stream that delivered an event. A pod that does not
// decode is logged (sequence, source, index, error) and left out of its
// update; the stream and the other pods go on.
//
//	w := &client.Watcher{Client: podconfigv1.NewPodConfigServiceClient(cc), Log: log,
//		Handle: func(ev client.Event) { ... }}
//	go w.Run(ctx)
package client
