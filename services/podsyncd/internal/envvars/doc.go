// Package envvars computes a container's environment the way the kubelet
// does: envFrom sources first, then env entries (which win), with values
// from literals ($(VAR) expanded), the pod's own fields, its resources, and
// ConfigMaps and Secrets read through a Source, and env files in the pod's
// volumes (fileKeyRef, Info.VolumePaths).
//
//	envs, err := envvars.Resolve(ctx, pod, container, src, envvars.Info{PodIPs: ips})
//	// err is the CreateContainerConfigError message when a required object is missing.
package envvars
