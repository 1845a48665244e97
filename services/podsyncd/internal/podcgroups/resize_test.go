package podcgroups

import "testing"

func TestLarger(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	i := func(v int64) *int64 { return &v }
	a := Resources{CPUShares: u(100), CPUQuota: i(20000), CPUPeriod: u(100000), Memory: i(40 << 20)}
	b := Resources{CPUShares: u(300), CPUQuota: i(10000), CPUPeriod: u(100000), Memory: i(60 << 20)}
	got := larger(a, b)
	if *got.CPUShares != 300 || *got.CPUQuota != 20000 || *got.Memory != 60<<20 || *got.CPUPeriod != 100000 {
		t.Errorf("larger = shares %d quota %d memory %d", *got.CPUShares, *got.CPUQuota, *got.Memory)
	}
	b.CPUQuota = i(-1)
	if got := larger(a, b); *got.CPUQuota != -1 {
		t.Errorf("unlimited quota lost: %d", *got.CPUQuota)
	}
	// A limit only one side declares is left as the cgroup has it.
	b.Memory = nil
	b.CPUQuota = nil
	if got := larger(a, b); got.Memory != nil || got.CPUQuota != nil || got.CPUPeriod != nil {
		t.Errorf("one-sided limits set: %+v", got)
	}
}
