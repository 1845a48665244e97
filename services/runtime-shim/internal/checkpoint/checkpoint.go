package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/microlet/microlet/internal/statefile"
)

// ErrNotFound is returned by Get for a sandbox without a checkpoint.
var ErrNotFound = errors.New("checkpoint not found")

// ValidID reports whether id is usable as a file name (Docker's IDs are
// hex): 1 to 128 characters, the first a letter or a digit, the others
// letters, digits, '_', '.' or '-'. A loop rather than a regexp: the
// `{0,127}` repetition compiled to a 118 KB program held from start-up.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// PortMapping is one CRI port mapping of the sandbox.
type PortMapping struct {
	Protocol      string `json:"protocol"`
	ContainerPort int32  `json:"container_port"`
	HostPort      int32  `json:"host_port"`
	HostIP        string `json:"host_ip,omitempty"`
}

// Sandbox is what a checkpoint holds for one pod sandbox.
type Sandbox struct {
	// Version lets a later shim read older files.
	Version        int               `json:"version"`
	ID             string            `json:"id"`
	Name           string            `json:"name"`
	PodName        string            `json:"pod_name"`
	Namespace      string            `json:"namespace"`
	UID            string            `json:"uid"`
	Attempt        uint32            `json:"attempt"`
	Labels         map[string]string `json:"labels,omitempty"`
	Annotations    map[string]string `json:"annotations,omitempty"`
	Ports          []PortMapping     `json:"ports,omitempty"`
	HostNetwork    bool              `json:"host_network,omitempty"`
	LogDir         string            `json:"log_dir,omitempty"`
	RuntimeHandler string            `json:"runtime_handler,omitempty"`
	// CreatedAt is in Unix nanoseconds.
	CreatedAt int64 `json:"created_at"`
}

// Store is a directory of sandbox checkpoints.
type Store struct {
	dir string
	log *slog.Logger
}

// NewStore creates dir when missing and returns its store. log (may be nil)
// gets the Warning for a checkpoint moved aside as corrupt.
func NewStore(dir string, log *slog.Logger) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint dir: %w", err)
	}
	// Temporary files of a write a crash interrupted are never read.
	if _, err := statefile.Sweep(dir); err != nil {
		return nil, fmt.Errorf("checkpoint dir: %w", err)
	}
	return &Store{dir: dir, log: log}, nil
}

func (s *Store) path(id string) (string, error) {
	if !ValidID(id) {
		return "", fmt.Errorf("checkpoint: invalid sandbox id %q", id)
	}
	return filepath.Join(s.dir, id+".json"), nil
}

// Put writes the checkpoint crash-safely (statefile: temp file, fsync,
// rename, fsync dir), so a crash never leaves a half-written file behind.
func (s *Store) Put(sb Sandbox) error {
	p, err := s.path(sb.ID)
	if err != nil {
		return err
	}
	if sb.Version == 0 {
		sb.Version = 1
	}
	b, err := json.Marshal(sb)
	if err != nil {
		return err
	}
	return statefile.WriteFile(p, b, 0o600)
}

// Get reads one checkpoint. One that does not decode (a crash of an older
// writer, a bad disk) is moved aside (statefile.Quarantine) and reported as
// ErrNotFound: the sandbox is then known from its Docker container alone,
// or, when that is gone too, as absent, so its network is torn down.
func (s *Store) Get(id string) (Sandbox, error) {
	p, err := s.path(id)
	if err != nil {
		return Sandbox{}, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return Sandbox{}, ErrNotFound
	}
	if err != nil {
		return Sandbox{}, err
	}
	var sb Sandbox
	if err := json.Unmarshal(b, &sb); err != nil {
		bad := fmt.Errorf("sandbox checkpoint %s: %w", p, err)
		if _, qerr := statefile.Quarantine(s.log, p, bad); qerr != nil {
			return Sandbox{}, errors.Join(bad, qerr)
		}
		return Sandbox{}, fmt.Errorf("%w (moved aside as corrupt)", ErrNotFound)
	}
	return sb, nil
}

// Delete removes a checkpoint; a missing one is not an error.
func (s *Store) Delete(id string) error {
	p, err := s.path(id)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// List returns every readable checkpoint; corrupt ones are moved aside
// (Get), and files that cannot be read are skipped and reported in the
// error, so one bad file cannot hide the others.
func (s *Store) List() ([]Sandbox, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var out []Sandbox
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
			continue
		}
		sb, err := s.Get(strings.TrimSuffix(name, ".json"))
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, sb)
	}
	return out, errors.Join(errs...)
}
