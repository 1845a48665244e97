// Package core mirrors the layout of Kubernetes' internal core API types
// (k8s.io/kubernetes/pkg/apis/core) reachable from Pod: the same package
// name, type names, field names, field order and field types. Nothing uses
// these types except the static-pod UID hash, which prints a pod in that
// layout exactly as the kubelet does; mirroring them lets podconfig compute
// the same UIDs without importing k8s.io/kubernetes.
//
// zz_generated.types.go is written by services/podconfig/gen/cmd/gencore
// (a module that may import k8s.io/kubernetes) from the internal types by
// reflection: `make generate` rewrites it (do so when the Kubernetes minor
// moves) and `make check-generate` fails when it drifts.
package core
