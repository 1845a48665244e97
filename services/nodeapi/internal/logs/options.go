package logs

import (
	"fmt"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	crilogs "k8s.io/cri-client/pkg/logs"
)

// parameterCodec decodes a query into the v1 PodLogOptions. k8s.io/api
// registers the type but not its url.Values conversion (that one is
// generated inside k8s.io/kubernetes), so the scheme gets ours below.
var parameterCodec = newParameterCodec()

func newParameterCodec() runtime.ParameterCodec {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		panic(fmt.Sprintf("logs: register core/v1: %v", err))
	}
	err := scheme.AddConversionFunc((*url.Values)(nil), (*corev1.PodLogOptions)(nil), func(a, b any, s conversion.Scope) error {
		return queryToPodLogOptions(*a.(*url.Values), b.(*corev1.PodLogOptions), s)
	})
	if err != nil {
		panic(fmt.Sprintf("logs: register PodLogOptions query conversion: %v", err))
	}
	return runtime.NewParameterCodec(scheme)
}

// queryToPodLogOptions fills every field of out from its json-named query
// parameter, resetting absent ones, with apimachinery's own per-type
// parsers (so "follow" alone means true and a bad number is an error, as
// on every other Kubernetes endpoint).
func queryToPodLogOptions(q url.Values, out *corev1.PodLogOptions, s conversion.Scope) error {
	*out = corev1.PodLogOptions{}
	fields := []struct {
		key string
		set func(v []string) error
	}{
		{"container", func(v []string) error { return runtime.Convert_Slice_string_To_string(&v, &out.Container, s) }},
		{"follow", func(v []string) error { return runtime.Convert_Slice_string_To_bool(&v, &out.Follow, s) }},
		{"previous", func(v []string) error { return runtime.Convert_Slice_string_To_bool(&v, &out.Previous, s) }},
		{"sinceSeconds", func(v []string) error { return runtime.Convert_Slice_string_To_Pointer_int64(&v, &out.SinceSeconds, s) }},
		{"sinceTime", func(v []string) error { return metav1.Convert_Slice_string_To_Pointer_v1_Time(&v, &out.SinceTime, s) }},
		{"timestamps", func(v []string) error { return runtime.Convert_Slice_string_To_bool(&v, &out.Timestamps, s) }},
		{"tailLines", func(v []string) error { return runtime.Convert_Slice_string_To_Pointer_int64(&v, &out.TailLines, s) }},
		{"limitBytes", func(v []string) error { return runtime.Convert_Slice_string_To_Pointer_int64(&v, &out.LimitBytes, s) }},
		{"insecureSkipTLSVerifyBackend", func(v []string) error {
			return runtime.Convert_Slice_string_To_bool(&v, &out.InsecureSkipTLSVerifyBackend, s)
		}},
		{"stream", func(v []string) error {
			out.Stream = &v[0]
			return nil
		}},
	}
	for _, f := range fields {
		v := q[f.key]
		if len(v) == 0 {
			continue
		}
		if err := f.set(v); err != nil {
			return fmt.Errorf("query parameter %q: %w", f.key, err)
		}
	}
	return nil
}

// decodeOptions turns the request's query into PodLogOptions the way the
// kubelet does: "tail" is an older spelling of "tailLines" that wins over
// it, and tail=all means no limit.
func decodeOptions(query url.Values, splitStreams bool) (*corev1.PodLogOptions, error) {
	q := make(url.Values, len(query))
	for k, v := range query {
		q[k] = v
	}
	if tail := q.Get("tail"); tail != "" {
		if tail == "all" {
			delete(q, "tailLines")
		} else {
			q["tailLines"] = []string{tail}
		}
	}
	opts := &corev1.PodLogOptions{}
	if err := parameterCodec.DecodeParameters(q, corev1.SchemeGroupVersion, opts); err != nil {
		return nil, err
	}
	if splitStreams && opts.Stream == nil {
		// With the gate on, the API defaults an absent stream to All.
		all := corev1.LogStreamAll
		opts.Stream = &all
	}
	return opts, nil
}

var validStreams = sets.New(corev1.LogStreamStdout, corev1.LogStreamStderr, corev1.LogStreamAll)

// validateOptions holds the checks the API applies to v1 PodLogOptions
// (the kubelet answers 422 when any fails); k8s.io/kubernetes is not a
// dependency of this module, so they live here.
func validateOptions(o *corev1.PodLogOptions) field.ErrorList {
	var errs field.ErrorList
	if o.TailLines != nil && *o.TailLines < 0 {
		errs = append(errs, field.Invalid(field.NewPath("tailLines"), *o.TailLines, "must be greater than or equal to 0"))
	}
	if o.LimitBytes != nil && *o.LimitBytes < 1 {
		errs = append(errs, field.Invalid(field.NewPath("limitBytes"), *o.LimitBytes, "must be greater than 0"))
	}
	if o.SinceSeconds != nil && o.SinceTime != nil {
		errs = append(errs, field.Forbidden(field.NewPath(""), "sinceTime and sinceSeconds are mutually exclusive"))
	} else if o.SinceSeconds != nil && *o.SinceSeconds < 1 {
		errs = append(errs, field.Invalid(field.NewPath("sinceSeconds"), *o.SinceSeconds, "must be greater than 0"))
	}
	if o.Stream != nil {
		if !validStreams.Has(*o.Stream) {
			errs = append(errs, field.NotSupported(field.NewPath("stream"), *o.Stream, sets.List(validStreams)))
		}
		if *o.Stream != corev1.LogStreamAll && o.TailLines != nil {
			errs = append(errs, field.Forbidden(field.NewPath(""), "tailLines cannot be combined with a single stream yet"))
		}
	}
	return errs
}

// criOptions converts the API options into the CRI log reader's: the later
// of sinceSeconds (relative to now) and sinceTime is the start.
func criOptions(o *corev1.PodLogOptions, now time.Time) *crilogs.LogOptions {
	c := &crilogs.LogOptions{
		TailLines:  o.TailLines,
		LimitBytes: o.LimitBytes,
		Follow:     o.Follow,
		Timestamp:  o.Timestamps,
	}
	if o.SinceSeconds != nil {
		c.Since = now.Add(-time.Duration(*o.SinceSeconds) * time.Second)
	}
	if o.SinceTime != nil && o.SinceTime.After(c.Since) {
		c.Since = o.SinceTime.Time
	}
	return c
}
