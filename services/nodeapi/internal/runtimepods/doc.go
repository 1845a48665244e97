// Package runtimepods is the container runtime's own view of the pods on this
// node: ready sandboxes and running containers grouped by pod UID, newest pod
// first, as the kubelet's runtime manager builds it for GetPods(false). The
// kubelet API uses it to find the container an exec, attach or port-forward
// goes to, and to answer /runningpods/.
//
//	all, err := runtimepods.List(ctx, rt)
//	pod := all.Find("default", "web-0", "") // "" matches any UID
//	c := pod.Container("nginx")              // nil when not running
package runtimepods
