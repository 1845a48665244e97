package logs

import (
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crilogs "k8s.io/cri-client/pkg/logs"
	"k8s.io/utils/ptr"
)

func TestDecodeOptions(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	tests := []struct {
		name    string
		query   string
		split   bool
		want    *corev1.PodLogOptions
		wantErr string
	}{
		{name: "empty", query: "", want: &corev1.PodLogOptions{}},
		{
			name:  "every field",
			query: "container=c&follow=true&previous=1&sinceTime=2026-01-02T03:04:05Z&timestamps=true&tailLines=7&limitBytes=9&insecureSkipTLSVerifyBackend=true&stream=All",
			want: &corev1.PodLogOptions{Container: "c", Follow: true, Previous: true, SinceTime: &since, Timestamps: true,
				TailLines: ptr.To[int64](7), LimitBytes: ptr.To[int64](9), InsecureSkipTLSVerifyBackend: true, Stream: ptr.To("All")},
		},
		{name: "sinceSeconds", query: "sinceSeconds=30", want: &corev1.PodLogOptions{SinceSeconds: ptr.To[int64](30)}},
		// apimachinery's boolean parameters: present means true unless "false" or "0".
		{name: "bare follow is true", query: "follow", want: &corev1.PodLogOptions{Follow: true}},
		{name: "follow=false", query: "follow=FALSE&previous=0", want: &corev1.PodLogOptions{}},
		{name: "tail is tailLines", query: "tail=3", want: &corev1.PodLogOptions{TailLines: ptr.To[int64](3)}},
		{name: "tail wins over tailLines", query: "tail=3&tailLines=8", want: &corev1.PodLogOptions{TailLines: ptr.To[int64](3)}},
		{name: "tail=all drops tailLines", query: "tail=all&tailLines=8", want: &corev1.PodLogOptions{}},
		{name: "empty tail is ignored", query: "tail=&tailLines=8", want: &corev1.PodLogOptions{TailLines: ptr.To[int64](8)}},
		{name: "unknown parameters are ignored", query: "foo=bar&tailLines=1", want: &corev1.PodLogOptions{TailLines: ptr.To[int64](1)}},
		{name: "negative numbers decode (validation refuses them)", query: "tailLines=-1", want: &corev1.PodLogOptions{TailLines: ptr.To[int64](-1)}},
		{name: "stream without the gate stays as given", query: "stream=Stdout", want: &corev1.PodLogOptions{Stream: ptr.To("Stdout")}},
		{name: "gate on defaults stream to All", query: "follow=true", split: true, want: &corev1.PodLogOptions{Follow: true, Stream: ptr.To("All")}},
		{name: "gate on defaults stream even with no query", query: "", split: true, want: &corev1.PodLogOptions{Stream: ptr.To("All")}},
		{name: "gate on keeps a given stream", query: "stream=Stderr", split: true, want: &corev1.PodLogOptions{Stream: ptr.To("Stderr")}},
		{name: "bad tailLines", query: "tailLines=ten", wantErr: "tailLines"},
		{name: "bad tail", query: "tail=ten", wantErr: "tailLines"},
		{name: "empty tailLines", query: "tailLines=", wantErr: "tailLines"},
		{name: "bad limitBytes", query: "limitBytes=1k", wantErr: "limitBytes"},
		{name: "bad sinceSeconds", query: "sinceSeconds=1.5", wantErr: "sinceSeconds"},
		{name: "bad sinceTime", query: "sinceTime=yesterday", wantErr: "sinceTime"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeOptions(q, tt.split)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %q (decoded %+v)", err, tt.wantErr, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Semantic equality: sinceTime decodes in the local zone.
			if !equality.Semantic.DeepEqual(tt.want, got) {
				t.Errorf("options:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestDecodeOptionsLeavesQueryAlone(t *testing.T) {
	q := url.Values{"tail": {"all"}, "tailLines": {"8"}}
	if _, err := decodeOptions(q, false); err != nil {
		t.Fatal(err)
	}
	if q.Get("tailLines") != "8" {
		t.Errorf("the request's query was changed: %v", q)
	}
}

func TestValidateOptions(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name string
		opts corev1.PodLogOptions
		want []string // substrings of the errors, in order
	}{
		{name: "zero value", opts: corev1.PodLogOptions{}},
		{name: "tailLines 0 is fine", opts: corev1.PodLogOptions{TailLines: ptr.To[int64](0)}},
		{name: "everything valid", opts: corev1.PodLogOptions{TailLines: ptr.To[int64](5), LimitBytes: ptr.To[int64](1), SinceSeconds: ptr.To[int64](1), Stream: ptr.To("All")}},
		{name: "negative tailLines", opts: corev1.PodLogOptions{TailLines: ptr.To[int64](-1)}, want: []string{"tailLines"}},
		{name: "limitBytes 0", opts: corev1.PodLogOptions{LimitBytes: ptr.To[int64](0)}, want: []string{"limitBytes"}},
		{name: "negative limitBytes", opts: corev1.PodLogOptions{LimitBytes: ptr.To[int64](-5)}, want: []string{"limitBytes"}},
		{name: "sinceSeconds 0", opts: corev1.PodLogOptions{SinceSeconds: ptr.To[int64](0)}, want: []string{"sinceSeconds"}},
		{name: "negative sinceSeconds", opts: corev1.PodLogOptions{SinceSeconds: ptr.To[int64](-3)}, want: []string{"sinceSeconds"}},
		{name: "sinceSeconds and sinceTime", opts: corev1.PodLogOptions{SinceSeconds: ptr.To[int64](3), SinceTime: &now}, want: []string{"sinceTime and sinceSeconds"}},
		{name: "both since, bad seconds: one error", opts: corev1.PodLogOptions{SinceSeconds: ptr.To[int64](-3), SinceTime: &now}, want: []string{"sinceTime and sinceSeconds"}},
		{name: "unknown stream", opts: corev1.PodLogOptions{Stream: ptr.To("Both")}, want: []string{"stream"}},
		{name: "lower-case stream", opts: corev1.PodLogOptions{Stream: ptr.To("stdout")}, want: []string{"stream"}},
		{name: "single stream and tailLines", opts: corev1.PodLogOptions{Stream: ptr.To("Stderr"), TailLines: ptr.To[int64](1)}, want: []string{"tailLines cannot be combined"}},
		{name: "All and tailLines", opts: corev1.PodLogOptions{Stream: ptr.To("All"), TailLines: ptr.To[int64](1)}},
		{
			name: "several at once",
			opts: corev1.PodLogOptions{TailLines: ptr.To[int64](-1), LimitBytes: ptr.To[int64](0), Stream: ptr.To("x")},
			want: []string{"tailLines", "limitBytes", "stream", "tailLines cannot be combined"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := validateOptions(&tt.opts)
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors %v, want %d naming %q", len(errs), errs, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want it to mention %q", i, errs[i].Error(), w)
				}
			}
		})
	}
}

func TestCRIOptions(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	earlier := metav1.NewTime(now.Add(-time.Hour))
	later := metav1.NewTime(now.Add(-time.Second))
	tests := []struct {
		name string
		opts corev1.PodLogOptions
		want crilogs.LogOptions
	}{
		{name: "nothing", want: crilogs.LogOptions{}},
		{
			name: "copied fields",
			opts: corev1.PodLogOptions{TailLines: ptr.To[int64](3), LimitBytes: ptr.To[int64](4), Follow: true, Timestamps: true, Previous: true},
			want: crilogs.LogOptions{TailLines: ptr.To[int64](3), LimitBytes: ptr.To[int64](4), Follow: true, Timestamp: true},
		},
		{name: "sinceSeconds counts back from now", opts: corev1.PodLogOptions{SinceSeconds: ptr.To[int64](60)}, want: crilogs.LogOptions{Since: now.Add(-time.Minute)}},
		{name: "sinceTime", opts: corev1.PodLogOptions{SinceTime: &earlier}, want: crilogs.LogOptions{Since: earlier.Time}},
		// Validation refuses both together; the conversion still takes the later one.
		{name: "later sinceTime wins", opts: corev1.PodLogOptions{SinceSeconds: ptr.To[int64](60), SinceTime: &later}, want: crilogs.LogOptions{Since: later.Time}},
		{name: "later sinceSeconds wins", opts: corev1.PodLogOptions{SinceSeconds: ptr.To[int64](60), SinceTime: &earlier}, want: crilogs.LogOptions{Since: now.Add(-time.Minute)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := criOptions(&tt.opts, now)
			if !reflect.DeepEqual(&tt.want, got) {
				t.Errorf("LogOptions:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// FuzzDecodeOptions feeds arbitrary query strings through decoding and
// validation, as a client can: nothing may panic, and whatever passes
// validation must be safe to hand to the CRI log reader.
func FuzzDecodeOptions(f *testing.F) {
	for _, seed := range []string{
		"", "follow", "tail=all", "tail=-1&tailLines=3", "tailLines=9223372036854775807", "limitBytes=1&sinceSeconds=5",
		"sinceTime=2026-01-02T03:04:05.123456789Z", "stream=Stdout&tailLines=1", "previous=false&timestamps=0", "%zz=1&tail=%",
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	f.Fuzz(func(t *testing.T, raw string, split bool) {
		q, _ := url.ParseQuery(raw) // net/http keeps what parses, as r.URL.Query does
		opts, err := decodeOptions(q, split)
		if err != nil {
			return
		}
		if q.Get("tail") == "all" && opts.TailLines != nil {
			t.Fatalf("tail=all left tailLines %d", *opts.TailLines)
		}
		if split && opts.Stream == nil {
			t.Fatal("split streams left stream unset")
		}
		if len(validateOptions(opts)) > 0 {
			return
		}
		if opts.TailLines != nil && *opts.TailLines < 0 || opts.LimitBytes != nil && *opts.LimitBytes < 1 ||
			opts.SinceSeconds != nil && (*opts.SinceSeconds < 1 || opts.SinceTime != nil) {
			t.Fatalf("validation let through %+v", opts)
		}
		_ = criOptions(opts, t0)
	})
}
