package nodeshutdown

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/microlet/microlet/internal/statefile"
)

// StateFile is the name, in the data dir, of the record of the last
// graceful shutdown, upstream's graceful_node_shutdown_state: the metrics
// kubelet_graceful_shutdown_{start,end}_time_seconds come back from it
// after the node booted again.
const StateFile = "graceful_node_shutdown_state"

// State is the last graceful shutdown's start and end, in upstream's JSON.
type State struct {
	StartTime time.Time `json:"startTime"`
	EndTime   time.Time `json:"endTime"`
}

// ErrCorruptState wraps LoadState's error for a file that does not decode.
var ErrCorruptState = errors.New("graceful shutdown state does not decode")

// LoadState reads the state file at path; a missing file is the zero State.
func LoadState(path string) (State, error) {
	var s State
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return State{}, fmt.Errorf("%s: %w: %w", path, ErrCorruptState, err)
	}
	return s, nil
}

// StoreState writes s to path crash-safely (statefile: temp file, fsync,
// rename, fsync dir).
func StoreState(path string, s State) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return statefile.WriteFile(path, b, 0o644) //nolint:gosec // read by tools as the kubelet's state file is
}
