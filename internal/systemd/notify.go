package systemd

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Notifier reports a service's life cycle to systemd over NOTIFY_SOCKET. A nil
// *Notifier (no NOTIFY_SOCKET) is valid and does nothing, so callers need no
// checks.
type Notifier struct {
	log      *slog.Logger
	check    func(context.Context) error
	interval time.Duration // WATCHDOG=1 period, 0 when the watchdog is off

	mu       sync.Mutex
	stopped  bool
	stopPing context.CancelFunc
	pingDone chan struct{}
}

// NewNotifier returns a Notifier when NOTIFY_SOCKET is set, nil otherwise.
//
// check, if not nil, is asked before every watchdog ping; a failing check skips
// the ping. The skeleton passes a gRPC health check over the service's own
// socket, so a service whose listener or server is wedged stops pinging and
// systemd restarts it, which a bare timer could never prove.
func NewNotifier(log *slog.Logger, check func(context.Context) error) *Notifier {
	if os.Getenv("NOTIFY_SOCKET") == "" {
		return nil
	}
	n := &Notifier{log: log, check: check}
	// The variables are kept (unset=false): every later notification reads
	// NOTIFY_SOCKET again.
	wd, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("systemd watchdog settings ignored", "err", err)
	}
	if wd > 0 {
		// systemd's own advice: ping at half the timeout.
		n.interval = wd / 2
	}
	return n
}

// WatchdogInterval is how often WATCHDOG=1 is sent once ready (0: never).
func (n *Notifier) WatchdogInterval() time.Duration {
	if n == nil {
		return 0
	}
	return n.interval
}

// Ready sends READY=1 and starts the watchdog pings. Call it once the service
// answers SERVING; later calls do nothing.
func (n *Notifier) Ready() {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped || n.pingDone != nil {
		return
	}
	n.send(daemon.SdNotifyReady + "\nSTATUS=serving")
	ctx, cancel := context.WithCancel(context.Background())
	n.stopPing = cancel
	n.pingDone = make(chan struct{})
	go n.ping(ctx, n.pingDone)
}

// Stopping sends STOPPING=1 and ends the watchdog pings, so a slow drain is
// not mistaken for a hang. Call it when shutdown begins; it is idempotent.
func (n *Notifier) Stopping() {
	if n == nil {
		return
	}
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return
	}
	n.stopped = true
	cancel, done := n.stopPing, n.pingDone
	n.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	n.send(daemon.SdNotifyStopping + "\nSTATUS=stopping")
}

func (n *Notifier) ping(ctx context.Context, done chan struct{}) {
	defer close(done)
	if n.interval <= 0 {
		return
	}
	t := time.NewTicker(n.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n.check != nil {
			cctx, cancel := context.WithTimeout(ctx, n.interval)
			err := n.check(cctx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				n.log.Warn("health check failed; skipping the systemd watchdog ping", "err", err)
				continue
			}
		}
		n.send(daemon.SdNotifyWatchdog)
	}
}

func (n *Notifier) send(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		// systemd going away must not take the service with it.
		n.log.Warn("sd_notify failed", "state", state, "err", err)
	}
}
