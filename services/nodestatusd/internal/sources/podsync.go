package sources

import (
	"context"
	"time"

	podsyncv1 "github.com/microlet/microlet/proto/microlet/podsync/v1"
)

// PressureState is one reading of podsyncd's eviction manager.
type PressureState struct {
	// Err is set when podsyncd could not be asked.
	Err error
	// Synchronized is false until the eviction manager measured the node.
	Synchronized bool
	// Memory, Disk and PID say which pressure conditions hold.
	Memory, Disk, PID bool
	// Signals are the signals whose thresholds are met now.
	Signals []string
}

// PodSync is a cached client of podsyncd's GetNodePressure: podsyncd's
// eviction manager judges pressure, nodestatusd only reports it.
type PodSync struct {
	peer  peer[podsyncv1.PodSyncServiceClient]
	cache ttlCache[PressureState]
}

// NewPodSync returns a podsyncd source; readings younger than maxAge are reused.
func NewPodSync(endpoint string, maxAge time.Duration) *PodSync {
	return &PodSync{peer: newPeer("podsyncd", endpoint, podsyncv1.NewPodSyncServiceClient),
		cache: ttlCache[PressureState]{maxAge: maxAge, now: time.Now}}
}

// Close releases the connection.
func (p *PodSync) Close() { p.peer.close() }

// Get returns a reading no older than maxAge.
func (p *PodSync) Get(ctx context.Context) PressureState { return p.cache.get(ctx, p.read) }

func (p *PodSync) read(ctx context.Context) PressureState {
	client, err := p.peer.get()
	if err != nil {
		return PressureState{Err: err}
	}
	cctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	resp, err := client.GetNodePressure(cctx, &podsyncv1.GetNodePressureRequest{})
	if err != nil {
		return PressureState{Err: p.peer.wrap(err)}
	}
	return PressureState{Synchronized: resp.GetSynchronized(), Memory: resp.GetMemoryPressure(),
		Disk: resp.GetDiskPressure(), PID: resp.GetPidPressure(), Signals: resp.GetSignals()}
}
