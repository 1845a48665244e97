package probe

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/socket"
	supervisorv1 "github.com/microlet/microlet/proto/microlet/supervisor/v1"
)

// Result is what one probe found.
type Result struct {
	// Health is SERVING, NOT_SERVING or DOWN.
	Health supervisorv1.Health
	// Err explains a DOWN or NOT_SERVING result.
	Err error
}

// Health asks the grpc.health.v1 service at endpoint for the overall status.
// Nothing answering is DOWN. A peer without a health service (some external
// CRI runtimes) still answers gRPC, so it counts as SERVING.
func Health(ctx context.Context, endpoint string) Result {
	cc, err := grpcclient.Dial(endpoint)
	if err != nil {
		return Result{Health: supervisorv1.Health_HEALTH_DOWN, Err: err}
	}
	defer func() { _ = cc.Close() }()
	st, err := grpcclient.Check(ctx, cc, "")
	switch {
	case status.Code(err) == codes.Unimplemented:
		return Result{Health: supervisorv1.Health_HEALTH_SERVING}
	case err != nil:
		return Result{Health: supervisorv1.Health_HEALTH_DOWN, Err: err}
	case st == healthpb.HealthCheckResponse_SERVING:
		return Result{Health: supervisorv1.Health_HEALTH_SERVING}
	default:
		return Result{Health: supervisorv1.Health_HEALTH_NOT_SERVING, Err: fmt.Errorf("health is %s", st)}
	}
}

// String is the short name of h used in tables: SERVING, NOT_SERVING, DOWN.
func String(h supervisorv1.Health) string {
	return strings.TrimPrefix(h.String(), "HEALTH_")
}

// PeerPID returns the pid of the process that accepted a connection on the
// unix socket of endpoint (SO_PEERCRED), or 0 when nothing answers.
func PeerPID(endpoint string) int {
	path, err := socket.PathFromEndpoint(endpoint)
	if err != nil {
		return 0
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return 0
	}
	defer func() { _ = c.Close() }()
	cred, err := socket.PeerCred(c)
	if err != nil {
		return 0
	}
	return int(cred.PID)
}

// StartTime returns when process pid started, from /proc, or the zero time.
// It lets `microlet status` show an uptime for services it did not start.
func StartTime(pid int) time.Time {
	if pid <= 0 {
		return time.Time{}
	}
	p, err := procfs.NewProc(pid)
	if err != nil {
		return time.Time{}
	}
	stat, err := p.Stat()
	if err != nil {
		return time.Time{}
	}
	// Seconds since the epoch: the boot time plus the start in clock ticks.
	start, err := stat.StartTime()
	if err != nil {
		return time.Time{}
	}
	return time.Unix(0, int64(start*float64(time.Second)))
}
