package server

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv/controlplane"
)

// nodeStatusPatches is the API server's count of PATCH requests on
// nodes/status (apiserver_request_total), from every client.
func nodeStatusPatches(ctx context.Context, admin kubernetes.Interface) (float64, error) {
	body, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("apiserver /metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("parse /metrics: %w", err)
	}
	var n float64
	for _, m := range mfs["apiserver_request_total"].GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		if l["verb"] == "PATCH" && l["resource"] == "nodes" && l["subresource"] == "status" {
			n += m.GetCounter().GetValue()
		}
	}
	return n, nil
}

// TestIdleNodeNotPatched: a Ready node whose runtime lists equal-size images
// in a different order at every call, checked every second, writes its
// status no more during a real minute than its report frequency (5 min)
// asks: the API server counts no PATCH of nodes/status. With images sorted
// by size only, each new order was a change (7 writes a minute were seen).
func TestIdleNodeNotPatched(t *testing.T) {
	cp := controlplane.Get(t)
	ctx := context.Background()
	const name = "nsd-idle-1"
	admin := adminClient(t, cp)
	var images []*runtimeapi.Image
	for _, id := range []string{"sha256:aa", "sha256:bb", "sha256:cc", "sha256:dd"} {
		images = append(images, &runtimeapi.Image{Id: id, RepoTags: []string{"img-" + id[7:] + ":1"}, Size: 5 << 20})
	}
	r := startRig(t, rigOpts{kubeconfig: cp.NodeKubeconfig(name), node: name, images: images})
	eventually(t, "node Ready with its four images", func() error {
		n, err := getNode(ctx, admin, name)
		if err != nil {
			return err
		}
		if c := condition(n, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue || len(n.Status.Images) != 4 {
			return fmt.Errorf("Ready = %+v, %d images", c, len(n.Status.Images))
		}
		return nil
	})
	// Let the first reports settle (cloud metadata, addresses), then count.
	var before float64
	eventually(t, "no status write for 5 s", func() error {
		a, err := nodeStatusPatches(ctx, admin)
		if err != nil {
			return err
		}
		time.Sleep(5 * time.Second)
		b, err := nodeStatusPatches(ctx, admin)
		if err != nil {
			return err
		}
		if b != a {
			return fmt.Errorf("%v PATCHes in 5 s", b-a)
		}
		before = b
		return nil
	})
	r.cri.mu.Lock()
	callsBefore := r.cri.imageCalls
	r.cri.mu.Unlock()
	time.Sleep(time.Minute)
	after, err := nodeStatusPatches(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	r.cri.mu.Lock()
	calls := r.cri.imageCalls - callsBefore
	r.cri.mu.Unlock()
	if calls < 2 {
		t.Fatalf("the runtime's images were listed %d times in the minute; the test proves nothing", calls)
	}
	if after != before {
		t.Fatalf("%v PATCHes of nodes/status in a minute of an idle node (images listed %d times in changing order), want 0", after-before, calls)
	}
	t.Logf("0 PATCHes of nodes/status in 60 s; images listed %d times", calls)
}
