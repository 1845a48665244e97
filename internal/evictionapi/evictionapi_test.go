package evictionapi

import (
	"strings"
	"testing"
	"time"
)

// The cases follow upstream's TestParseThresholdConfig
// (pkg/kubelet/eviction/helpers_test.go).
func TestParse(t *testing.T) {
	th, err := Parse(Config{
		Hard:            map[string]string{"memory.available": "150Mi", "nodefs.available": "10%", "imagefs.inodesFree": "0%"},
		Soft:            map[string]string{"memory.available": "300Mi", "pid.available": "500"},
		SoftGracePeriod: map[string]string{"memory.available": "30s", "pid.available": "1m30s", "nodefs.available": "5s"},
		MinimumReclaim:  map[string]string{"memory.available": "0", "nodefs.available": "5%"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range th {
		s := x.String()
		if x.MinReclaim != nil {
			s += " reclaim " + x.MinReclaim.String()
		}
		got = append(got, s)
	}
	want := []string{
		"memory.available<150Mi reclaim 0",
		"nodefs.available<10% reclaim 5%", // imagefs.inodesFree "0%" switches the threshold off
		"memory.available<300Mi for 30s reclaim 0",
		"pid.available<500 for 1m30s",
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if v := th[1].Value.Of(1000); v != 100 {
		t.Fatalf("10%% of 1000 = %d", v)
	}
	if h, ok := Find(th, SignalMemoryAvailable); !ok || !h.Hard() || h.Value.Of(0) != 150<<20 {
		t.Fatalf("Find(memory) = %+v %v", h, ok)
	}
	if th[3].GracePeriod != 90*time.Second || th[3].Signal.Condition() != "PIDPressure" || th[3].Signal.Resource() != "pids" {
		t.Fatalf("pid threshold = %+v", th[3])
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Hard: map[string]string{"mem.available": "150Mi"}}, `eviction_hard: unsupported eviction signal "mem.available"`},
		{Config{Hard: map[string]string{"memory.available": "-150Mi"}}, "eviction_hard: memory.available: eviction threshold must be positive"},
		{Config{Hard: map[string]string{"memory.available": "0"}}, "eviction_hard: memory.available: eviction threshold must be positive"},
		{Config{Hard: map[string]string{"memory.available": "lots"}}, `eviction_hard: memory.available: "lots"`},
		{Config{Hard: map[string]string{"nodefs.available": "110%"}}, "eviction_hard: nodefs.available: eviction percentage threshold must be within"},
		{Config{Hard: map[string]string{"nodefs.available": "-5%"}}, "eviction_hard: nodefs.available: eviction percentage threshold must be within"},
		{Config{Soft: map[string]string{"memory.available": "150Mi"}}, "eviction_soft_grace_period: grace period must be specified for the soft eviction threshold memory.available"},
		{Config{Soft: map[string]string{"memory.available": "x%"}}, "eviction_soft: memory.available: bad percentage"},
		{Config{SoftGracePeriod: map[string]string{"memory.available": "-30s"}}, "eviction_soft_grace_period: memory.available: invalid eviction grace period"},
		{Config{SoftGracePeriod: map[string]string{"memory.available": "soon"}}, "eviction_soft_grace_period: memory.available:"},
		{Config{MinimumReclaim: map[string]string{"memory.available": "-1Gi"}}, "eviction_minimum_reclaim: memory.available: negative eviction minimum reclaim"},
		{Config{MinimumReclaim: map[string]string{"memory.available": "0%"}}, "eviction_minimum_reclaim: memory.available: eviction percentage minimum reclaim must be positive"},
		{Config{MinimumReclaim: map[string]string{"disk.available": "1Gi"}}, `eviction_minimum_reclaim: unsupported eviction signal "disk.available"`},
	} {
		_, err := Parse(tc.c)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Parse(%+v) = %v, want %q...", tc.c, err, tc.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	th, err := Parse(Config{Hard: DefaultEvictionHard})
	if err != nil {
		t.Fatal(err)
	}
	if len(th) != 5 {
		t.Fatalf("defaults: %v", th)
	}
	for _, x := range th {
		if !x.Hard() {
			t.Errorf("%s is not hard", x)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("memory.available", "100Mi", "30s")
	f.Add("nodefs.available", "10%", "1m")
	f.Fuzz(func(t *testing.T, sig, val, grace string) {
		th, err := Parse(Config{Hard: map[string]string{sig: val}, Soft: map[string]string{sig: val}, SoftGracePeriod: map[string]string{sig: grace}})
		if err != nil {
			return
		}
		for _, x := range th {
			if !x.Signal.Valid() || x.GracePeriod < 0 {
				t.Fatalf("accepted %+v", x)
			}
			if x.Value.Quantity == nil && (x.Value.Percentage < 0 || x.Value.Percentage > 1) {
				t.Fatalf("accepted percentage %v", x.Value.Percentage)
			}
		}
	})
}
