// Command gencore writes services/podconfig/internal/manifest/internal/core:
// Go declarations with the exact layout of Kubernetes' internal core types
// reachable from Pod, taken from the real types by reflection.
//
//	cd services/podconfig/bench && go run ./cmd/gencore > ../internal/manifest/internal/core/zz_generated.types.go
package main

import (
	"reflect"

	api "k8s.io/kubernetes/pkg/apis/core"
)

func main() { gen(reflect.TypeOf(api.Pod{}), "core") }
