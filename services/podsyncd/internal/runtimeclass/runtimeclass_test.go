package runtimeclass

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func pod(class *string) *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{RuntimeClassName: class}}
}

// TestHandler: no class and a nil Classes give the default handler; a
// known class gives its handler; a missing one, or any before the first
// list, is an error naming the class.
func TestHandler(t *testing.T) {
	var none *Classes
	if h, err := none.Handler(pod(ptr.To("gvisor"))); h != "" || err != nil {
		t.Errorf("standalone: Handler = %q, %v; want the default", h, err)
	}

	client := fake.NewClientset(&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"})
	c := New(client)
	if _, err := c.Handler(pod(ptr.To("gvisor"))); err == nil || !strings.Contains(err.Error(), `"gvisor"`) {
		t.Errorf("before the first list: err = %v, want one naming the class", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.Start(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		t.Fatal("RuntimeClasses never listed")
	}
	for _, tc := range []struct {
		class   *string
		want    string
		wantErr string
	}{
		{nil, "", ""},
		{ptr.To(""), "", ""},
		{ptr.To("gvisor"), "runsc", ""},
		{ptr.To("kata"), "", `RuntimeClass "kata" not found`},
	} {
		h, err := c.Handler(pod(tc.class))
		if h != tc.want || (err == nil) != (tc.wantErr == "") || (err != nil && err.Error() != tc.wantErr) {
			t.Errorf("class %v: Handler = %q, %v; want %q, %q", ptr.Deref(tc.class, "<nil>"), h, err, tc.want, tc.wantErr)
		}
	}
}
