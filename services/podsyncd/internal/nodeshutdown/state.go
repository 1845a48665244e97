package nodeshutdown

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
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
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// StoreState writes s to path atomically (a temporary file synced, then renamed).
func StoreState(path string, s State) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	if werr == nil {
		werr = f.Chmod(0o644)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(f.Name())
		return werr
	}
	return os.Rename(f.Name(), path)
}
