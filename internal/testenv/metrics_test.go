package testenv

import (
	"reflect"
	"testing"
)

func TestCRICalls(t *testing.T) {
	m, err := ParseMetrics([]byte(`# TYPE grpc_server_handled_total counter
grpc_server_handled_total{grpc_code="OK",grpc_method="ListContainers",grpc_service="runtime.v1.RuntimeService",grpc_type="unary"} 40
grpc_server_handled_total{grpc_code="NotFound",grpc_method="ListContainers",grpc_service="runtime.v1.RuntimeService",grpc_type="unary"} 2
grpc_server_handled_total{grpc_code="OK",grpc_method="ImageStatus",grpc_service="runtime.v1.ImageService",grpc_type="unary"} 5
grpc_server_handled_total{grpc_code="OK",grpc_method="Check",grpc_service="grpc.health.v1.Health",grpc_type="unary"} 100
grpc_server_handled_total{grpc_code="OK",grpc_method="Version",grpc_service="runtime.v1alpha2.RuntimeService",grpc_type="unary"} 7
# TYPE grpc_server_started_total counter
grpc_server_started_total{grpc_method="ListContainers",grpc_service="runtime.v1.RuntimeService",grpc_type="unary"} 43
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"ListContainers": 42, "ImageStatus": 5}
	if got := m.CRICalls(); !reflect.DeepEqual(got, want) {
		t.Errorf("CRICalls = %v, want %v (every code of the runtime.v1 services, handled only)", got, want)
	}
	if got := (Metrics{}).CRICalls(); len(got) != 0 {
		t.Errorf("CRICalls of no metrics = %v, want none", got)
	}
}
