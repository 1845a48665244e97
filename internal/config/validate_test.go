package config

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestPositiveAndNotNegative(t *testing.T) {
	p := field.NewPath("sync_frequency")
	for _, tc := range []struct {
		name string
		errs field.ErrorList
		want string
	}{
		{"positive duration", Positive(p, time.Second), ""},
		{"zero duration", Positive(p, time.Duration(0)), `sync_frequency: Invalid value: "0s": must be positive`},
		{"negative duration", Positive(p, -90*time.Second), `sync_frequency: Invalid value: "-1m30s": must be positive`},
		{"zero int", Positive(p, 0), `sync_frequency: Invalid value: 0: must be positive`},
		{"positive int32", Positive(p, int32(3)), ""},
		{"negative float", Positive(p, -0.5), `sync_frequency: Invalid value: -0.5: must be positive`},
		{"zero is not negative", NotNegative(p, time.Duration(0)), ""},
		{"negative duration", NotNegative(p, -time.Second), `sync_frequency: Invalid value: "-1s": must not be negative`},
		{"negative int64", NotNegative(p, int64(-2)), `sync_frequency: Invalid value: -2: must not be negative`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if len(tc.errs) > 0 {
				got = tc.errs.ToAggregate().Error()
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
