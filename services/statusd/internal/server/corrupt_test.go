package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/internal/grpcclient"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
	"github.com/microlet/microlet/services/statusd/internal/server"
)

// TestCorruptStoreDoesNotStopStatusd: the real binary, standalone, finds
// its store damaged as after a power loss. A record that does not decode is
// quarantined with a warning and the others are served; a file that is not
// a database at all is moved aside and statusd starts empty. It serves
// either way instead of restarting in a loop.
func TestCorruptStoreDoesNotStopStatusd(t *testing.T) {
	bin := statusdBinary(t)
	dir, err := shortTempDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeAll(dir) })
	data := filepath.Join(dir, "data")
	db := server.DBPath(data)
	args := []string{"--run-dir", dir, "--data-dir", data, "--node-name", "corrupt"}
	start := func() (*proc, statusdv1.StatusServiceClient) {
		t.Helper()
		p := startStatusd(t, bin, args...)
		cc, err := grpcclient.Dial("unix://" + filepath.Join(dir, "statusd.sock"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := grpcclient.WaitServing(ctx, cc, ""); err != nil {
			t.Fatalf("statusd not serving: %v", err)
		}
		return p, statusdv1.NewStatusServiceClient(cc)
	}
	stop := func(p *proc) {
		t.Helper()
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		<-p.done
	}
	logOf := func(p *proc) string {
		b, _ := os.ReadFile(p.log)
		return string(b)
	}
	ctx := context.Background()

	p, client := start()
	for _, name := range []string{"kept", "garbled"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		raw, _ := pod.Marshal()
		sb, _ := runningStatus(0, true).Marshal()
		if _, err := client.SetPodStatus(ctx, &statusdv1.SetPodStatusRequest{Pod: raw, Status: sb}); err != nil {
			t.Fatal(err)
		}
	}
	stop(p)

	// One record garbled in place.
	bdb, err := bolt.Open(db, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("pods")).Put([]byte("uid-garbled"), []byte("{not json"))
	}); err != nil {
		t.Fatal(err)
	}
	_ = bdb.Close()
	p, client = start()
	if _, err := client.GetPodStatus(ctx, &statusdv1.GetPodStatusRequest{PodUid: "uid-kept"}); err != nil {
		t.Fatalf("intact record not served after a garbled one: %v", err)
	}
	if _, err := client.GetPodStatus(ctx, &statusdv1.GetPodStatusRequest{PodUid: "uid-garbled"}); status.Code(err) != codes.NotFound {
		t.Fatalf("garbled record: %v, want NotFound", err)
	}
	if log := logOf(p); !strings.Contains(log, "quarantined") || !strings.Contains(log, "uid-garbled") {
		t.Fatalf("no warning naming the quarantined record:\n%s", log)
	}
	stop(p)

	// The whole file torn: half of it, then garbage.
	b, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, append(b[:len(b)/2:len(b)/2], []byte("garbage after a power loss")...), 0o600); err != nil {
		t.Fatal(err)
	}
	p, client = start()
	if _, err := client.GetPodStatus(ctx, &statusdv1.GetPodStatusRequest{PodUid: "uid-kept"}); status.Code(err) != codes.NotFound {
		t.Fatalf("status from a torn store: %v, want NotFound (started empty)", err)
	}
	aside, _ := filepath.Glob(db + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("torn store not moved aside: %v", aside)
	}
	if log := logOf(p); !strings.Contains(log, "moved aside") || !strings.Contains(log, filepath.Base(aside[0])) {
		t.Fatalf("no warning naming where the store went:\n%s", log)
	}
	// And it works: a new status is accepted and kept.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "after", Namespace: "default", UID: "uid-after"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	raw, _ := pod.Marshal()
	sb, _ := runningStatus(0, true).Marshal()
	if _, err := client.SetPodStatus(ctx, &statusdv1.SetPodStatusRequest{Pod: raw, Status: sb}); err != nil {
		t.Fatalf("statusd on a fresh store refuses a status: %v", err)
	}
}
