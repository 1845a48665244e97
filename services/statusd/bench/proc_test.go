package bench

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/procinfo"
)

// cpuTime is a process's user+system CPU time so far (0 when pid is 0 or
// the process is gone).
func cpuTime(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	u, err := procinfo.Of(pid)
	if err != nil {
		return 0
	}
	return time.Duration(u.CPUSeconds * float64(time.Second))
}

// loadAvg is the machine's 1-minute load average.
func loadAvg() float64 {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return -1
	}
	l, err := fs.LoadAvg()
	if err != nil {
		return -1
	}
	return l.Load1
}

// podRequests sums apiserver_request_total for pods by verb ("PATCH/status"
// for the status subresource); answers other than 2xx are also summed
// under "error".
func podRequests(ctx context.Context, admin kubernetes.Interface) (map[string]float64, error) {
	raw, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "apiserver_request_total{") || !strings.Contains(l, `resource="pods"`) {
			continue
		}
		j := strings.LastIndexByte(l, ' ')
		verb, code := label(l, "verb"), label(l, "code")
		if verb == "" || j < 0 {
			continue
		}
		v, _ := strconv.ParseFloat(l[j+1:], 64)
		if label(l, "subresource") == "status" {
			verb += "/status"
		}
		out[verb] += v
		if !strings.HasPrefix(code, "2") {
			out["error"] += v
		}
	}
	return out, sc.Err()
}

// label is the value of name in a Prometheus text-format sample line.
func label(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	v := line[i+len(name)+2:]
	if j := strings.IndexByte(v, '"'); j >= 0 {
		return v[:j]
	}
	return ""
}

// snapshot is what a row measures before and after it runs.
type snapshot struct {
	at                  time.Time
	load                float64
	apiCPU, etcdCPU, me time.Duration
	reqs                map[string]float64
}

func takeSnapshot(ctx context.Context, admin kubernetes.Interface, apiPID, etcdPID int) (snapshot, error) {
	reqs, err := podRequests(ctx, admin)
	return snapshot{
		at: time.Now(), load: loadAvg(), reqs: reqs,
		apiCPU: cpuTime(apiPID), etcdCPU: cpuTime(etcdPID), me: cpuTime(os.Getpid()),
	}, err
}
