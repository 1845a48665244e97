// Package podworkers runs one worker goroutine per pod, the kubelet's
// podWorkers: work on one pod is serial and ordered, different pods proceed in
// parallel, and each pod moves only forward through syncing → terminating →
// terminated, so a pod is never started while it is being killed. Static
// pods that share a full name start one at a time, each once the one
// before it has been cleaned up (statics.go).
package podworkers
