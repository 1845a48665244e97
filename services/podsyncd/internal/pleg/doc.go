// Package pleg is the pod lifecycle event generator: it relists the runtime's
// sandboxes and containers every period and reports which pods changed, so the
// pod workers sync them without waiting for their periodic resync. It is also
// fed by the CRI GetContainerEvents stream when the runtime serves one; relist
// stays on as the safety net.
package pleg
