// Package runtimehandlers keeps podsyncd's view of the CRI runtime's
// handlers and their features, read from the runtime's Status as the
// kubelet's runtime state keeps them (pkg/kubelet/runtime.go, refreshed by
// updateRuntimeUp in kubelet.go): only a ready runtime's list is taken, and
// the last one stays while the runtime is down. Mounts and container
// statuses ask it whether a pod's handler makes recursive read-only mounts
// (the kubelet's runtimeClassSupportsRecursiveReadOnlyMounts).
//
//	h := runtimehandlers.New(rt, log)
//	_ = h.Refresh(ctx)          // once the runtime answers
//	go h.Run(ctx, runtimehandlers.DefaultPeriod)
//	h.SupportsRecursiveReadOnlyMounts(handler) // "" is the default handler
package runtimehandlers
