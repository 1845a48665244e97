// Command gencore writes services/podconfig/internal/manifest/internal/core:
// Go declarations with the exact layout of Kubernetes' internal core types
// reachable from Pod, taken from the real types by reflection.
//
// `make generate` runs it; `make check-generate` fails when the committed
// file differs from its output.
package main

import (
	"reflect"

	api "k8s.io/kubernetes/pkg/apis/core"
)

func main() { gen(reflect.TypeOf(api.Pod{}), "core") }
