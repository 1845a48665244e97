// Package events records the kubelet's pod events (Pulling, Created,
// Started, Killing, Unhealthy, FailedMount, ...) as core/v1 Events through
// client-go's event broadcaster, with the node as the event source host.
// A standalone node (no API server) writes them to the log instead.
//
//	rec, stop := events.New(client, nodeName, events.Component, log) // client nil: log only
//	defer stop()
//	rec.Eventf(events.ContainerRef(pod, c), corev1.EventTypeNormal, events.Started, "Container started")
package events
