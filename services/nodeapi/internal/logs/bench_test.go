package logs

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crilogs "k8s.io/cri-client/pkg/logs"
)

// benchLogSize is the size of the benchmark's CRI log.
const benchLogSize = 100 << 20

// writeBenchLog writes about benchLogSize bytes of stdout and stderr CRI
// lines of 120 bytes each and returns the file's size.
func writeBenchLog(b *testing.B, path string) int64 {
	b.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var n int64
	for i := 0; n < benchLogSize; i++ {
		stream := "stdout"
		if i%10 == 9 {
			stream = "stderr"
		}
		// 30-byte timestamp, stream, tag, 80-byte message.
		k, err := fmt.Fprintf(w, "%s %s F request %09d served in 1.5ms by worker 7 with status 200 and a few more words\n",
			t0.Add(time.Duration(i)*time.Microsecond).Format(crilogs.RFC3339NanoFixed), stream, i)
		if err != nil {
			b.Fatal(err)
		}
		n += int64(k)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkContainerLogs reads a 100 MiB CRI log straight through the CRI
// log reader into io.Discard, and through the handler over plain HTTP on
// loopback, plain and in follow mode (the container has exited, so follow
// reads to the end but flushes every line). MB/s counts log file bytes.
//
//	go test -run '^$' -bench ContainerLogs -benchtime 5x ./services/nodeapi/internal/logs/
func BenchmarkContainerLogs(b *testing.B) {
	path := filepath.Join(b.TempDir(), "default_web_uid", "app", "0.log")
	size := writeBenchLog(b, path)
	rt := newFakeRuntime(criContainer("app-0", path, runtimeapi.ContainerState_CONTAINER_EXITED))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
			{Name: "app", ContainerID: "docker://app-0", State: terminated("docker://app-0")},
		}},
	}
	url := serve(b, NewHandler(fakePods{"default/web": pod}, rt, WithLogger(slog.New(slog.DiscardHandler)))) + "/containerLogs/default/web/app"

	b.Run("ReadLogs", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if err := crilogs.ReadLogs(context.Background(), path, "app-0", &crilogs.LogOptions{}, rt, io.Discard, io.Discard); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, bc := range []struct{ name, query string }{
		{name: "handler", query: ""},
		{name: "handler-follow", query: "?follow=true"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(size)
			var out int64
			for b.Loop() {
				resp, err := http.Get(url + bc.query)
				if err != nil {
					b.Fatal(err)
				}
				out, err = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d, %d bytes, %v", resp.StatusCode, out, err)
				}
			}
			b.ReportMetric(float64(out)/float64(size), "out/in")
		})
	}
}
