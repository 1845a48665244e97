package podruntime

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestContainerResources(t *testing.T) {
	q := func(s string) string {
		if s == "" {
			return "<nil>"
		}
		v := resource.MustParse(s)
		return v.String()
	}
	str := func(v *resource.Quantity) string {
		if v == nil {
			return "<nil>"
		}
		return v.String()
	}
	tests := []struct {
		name                    string
		in                      *runtimeapi.ContainerResources
		cpuReq, cpuLim, memLimt string
		none                    bool
	}{
		{name: "nothing reported", in: nil, none: true},
		{name: "no linux part", in: &runtimeapi.ContainerResources{}, none: true},
		{name: "best effort: 2 shares, no quota", in: &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000}},
			cpuReq: "2m"},
		{name: "100m/200m/64Mi", in: &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{
			CpuShares: 102, CpuQuota: 20000, CpuPeriod: 100000, MemoryLimitInBytes: 64 << 20}},
			cpuReq: "100m", cpuLim: "200m", memLimt: "64Mi"},
		{name: "1 CPU limit, unlimited quota ignored", in: &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{
			CpuShares: 1024, CpuQuota: -1, CpuPeriod: 100000}},
			cpuReq: "1"},
		{name: "nothing set", in: &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{}}, none: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := containerResources(tc.in)
			if tc.none {
				if got != nil {
					t.Fatalf("got %+v, want nil", got)
				}
				return
			}
			if got == nil {
				t.Fatal("got nil")
			}
			if str(got.CPURequest) != q(tc.cpuReq) || str(got.CPULimit) != q(tc.cpuLim) || str(got.MemoryLimit) != q(tc.memLimt) {
				t.Fatalf("got request %s limit %s memory %s, want %s %s %s", str(got.CPURequest), str(got.CPULimit), str(got.MemoryLimit),
					q(tc.cpuReq), q(tc.cpuLim), q(tc.memLimt))
			}
		})
	}
}
