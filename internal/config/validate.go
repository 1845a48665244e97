package config

import (
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Number is what Positive and NotNegative check.
type Number interface {
	~int | ~int32 | ~int64 | ~float32 | ~float64
}

// Positive is every service's check of a setting that must be above zero:
// nothing when v > 0, else one field.Invalid error for p,
// `<key>: Invalid value: "0s": must be positive`. A duration is shown as Go
// writes it ("1m30s").
func Positive[T Number](p *field.Path, v T) field.ErrorList {
	if v > 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(p, shown(v), "must be positive")}
}

// NotNegative is the check of a setting where zero has a meaning (off,
// none) but a negative value has none: nothing when v >= 0, else one
// field.Invalid error for p, "must not be negative".
func NotNegative[T Number](p *field.Path, v T) field.ErrorList {
	if v >= 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(p, shown(v), "must not be negative")}
}

// shown is how a bad value is printed: durations as their String, other
// numbers as they are.
func shown(v any) any {
	if d, ok := v.(time.Duration); ok {
		return d.String()
	}
	return v
}

// Join is errs as one error, one line each (nil when there are none): how
// a service reports every bad setting at once.
func Join(errs field.ErrorList) error {
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}
