package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

var (
	bucket = []byte("pods")
	// quarantine keeps the records that could not be read, under their
	// key, for a person to look at; nothing reads them back.
	quarantine = []byte("quarantine")
)

// Quarantined is a record moved out of the way because it could not be
// read: the service starts without it, and the node reports that pod's
// status again.
type Quarantined struct {
	// UID is the record's key.
	UID string
	// Reason says what was wrong with it.
	Reason string
}

// Record is what survives a restart for one pod: enough to rebuild the cache
// entry and to send the status again.
type Record struct {
	// UID of the pod as given by the caller (the static pod's UID for static pods).
	UID string `json:"uid"`
	// Namespace and Name of the pod.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Pod is the core/v1 Pod (spec and metadata) in protobuf encoding.
	Pod []byte `json:"pod"`
	// Status is the core/v1 PodStatus in protobuf encoding.
	Status []byte `json:"status"`
	// Version of the status; it keeps counting across restarts.
	Version uint64 `json:"version"`
	// Reclaimed is set once the node reported the pod's resources released.
	Reclaimed bool `json:"reclaimed,omitempty"`
	// Changed is when the first change not yet in the API was accepted.
	Changed time.Time `json:"changed"`
}

// Store is the bbolt-backed record set. It is safe for concurrent use.
type Store struct {
	db         *bolt.DB
	movedAside string

	mu          sync.Mutex
	quarantined []Quarantined
}

// Open opens (creating if needed) the database file at path. A file that is
// not a database bbolt can read whole (torn by a power loss, garbled) is
// renamed to <path>.corrupt-<UTC time> and a new one created, so the
// service starts from what it can rebuild rather than failing on every
// start; MovedAside names the old file then. Any other failure (the file
// locked by another statusd, no permission) is an error.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	db, err := openChecked(path)
	movedAside := ""
	var corrupt *corruptError
	if errors.As(err, &corrupt) {
		movedAside = fmt.Sprintf("%s.corrupt-%s", path, time.Now().UTC().Format("20060102T150405Z"))
		if rerr := os.Rename(path, movedAside); rerr != nil {
			return nil, fmt.Errorf("open %s: %w; moving it aside: %w", path, err, rerr)
		}
		db, err = openChecked(path)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// A short window: callers wait for the fsync anyway, and under load many
	// arrive within it; alone, a call waits at most this long extra.
	db.MaxBatchDelay = 2 * time.Millisecond
	db.MaxBatchSize = 1000
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	}); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("init %s: %w", path, err)
	}
	return &Store{db: db, movedAside: movedAside}, nil
}

// corruptError is a database file bbolt cannot read.
type corruptError struct{ err error }

func (e *corruptError) Error() string { return "corrupt database: " + e.err.Error() }
func (e *corruptError) Unwrap() error { return e.err }

// openChecked opens the file and walks it once (bbolt's consistency
// check: a database of a node's pods is small), so a damaged file is found
// at start and not by a panic in the middle of a write. bbolt panics on
// some damaged pages; that is a corrupt file too.
func openChecked(path string) (db *bolt.DB, err error) {
	// bbolt maps the file: a page past the end of a cut-short file is a
	// SIGBUS, which no recover catches. Check the size first, and turn a
	// fault that still happens here into a panic.
	if err := checkSize(path); err != nil {
		return nil, err
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if db != nil {
				_ = db.Close()
			}
			db, err = nil, &corruptError{fmt.Errorf("%v", p)}
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		if errors.Is(err, bolterrors.ErrInvalid) || errors.Is(err, bolterrors.ErrVersionMismatch) || errors.Is(err, bolterrors.ErrChecksum) ||
			strings.Contains(err.Error(), "file size too small") {
			return nil, &corruptError{err}
		}
		return nil, err
	}
	var problems []error
	if err := db.View(func(tx *bolt.Tx) error {
		for e := range tx.Check() {
			problems = append(problems, e)
		}
		return nil
	}); err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		_ = db.Close()
		return nil, &corruptError{errors.Join(problems...)}
	}
	return db, nil
}

// bbolt's meta page layout (go.etcd.io/bbolt internal/common): a 16-byte
// page header, then magic, version, page size, flags, the root bucket
// (16 bytes), the freelist's page id, the high-water page id and the txid.
const (
	metaMagic      = 0xED0CDAED
	offMagic       = 16
	offPageSize    = 24
	offHighWater   = 56
	metaHeaderSize = 80
)

// checkSize refuses a file whose meta pages claim more pages than it has
// (cut short by a crash or a full disk). Files too small to hold a meta
// page, or without bbolt's magic, are left to bbolt, which says so.
func checkSize(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	var head [metaHeaderSize]byte
	if _, err := f.ReadAt(head[:], 0); err != nil {
		return nil // too short for bbolt: it reports that itself
	}
	if binary.LittleEndian.Uint32(head[offMagic:]) != metaMagic {
		return nil
	}
	pageSize := int64(binary.LittleEndian.Uint32(head[offPageSize:]))
	if pageSize <= 0 {
		return &corruptError{fmt.Errorf("meta page size %d", pageSize)}
	}
	for _, off := range []int64{0, pageSize} {
		var meta [metaHeaderSize]byte
		if _, err := f.ReadAt(meta[:], off); err != nil {
			return &corruptError{fmt.Errorf("meta page at %d: %w", off, err)}
		}
		if binary.LittleEndian.Uint32(meta[offMagic:]) != metaMagic {
			continue
		}
		if hw := int64(binary.LittleEndian.Uint64(meta[offHighWater:])); hw*pageSize > size {
			return &corruptError{fmt.Errorf("file is %d bytes, its meta page at %d says %d pages of %d", size, off, hw, pageSize)}
		}
	}
	return nil
}

// MovedAside is the path the unreadable database file was renamed to when
// Open replaced it, else "".
func (s *Store) MovedAside() string { return s.movedAside }

// Quarantine moves a record that cannot be used out of the pods bucket into
// the quarantine bucket, with the reason, so that it is not loaded again.
func (s *Store) Quarantine(uid, reason string) error {
	s.mu.Lock()
	s.quarantined = append(s.quarantined, Quarantined{UID: uid, Reason: reason})
	s.mu.Unlock()
	return s.db.Update(func(tx *bolt.Tx) error {
		q, err := tx.CreateBucketIfNotExists(quarantine)
		if err != nil {
			return err
		}
		b := tx.Bucket(bucket)
		if v := b.Get([]byte(uid)); v != nil {
			if err := q.Put([]byte(uid), append([]byte(reason+"\n"), v...)); err != nil {
				return err
			}
		}
		return b.Delete([]byte(uid))
	})
}

// Quarantined lists the records moved aside since Open.
func (s *Store) Quarantined() []Quarantined {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.quarantined)
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Put stores r durably; it returns once the transaction holding it is on disk.
func (s *Store) Put(r Record) error {
	if r.UID == "" {
		return errors.New("store: record without uid")
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.db.Batch(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put([]byte(r.UID), data)
	})
}

// Delete removes the records of uids durably.
func (s *Store) Delete(uids ...string) error {
	if len(uids) == 0 {
		return nil
	}
	return s.db.Batch(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		for _, u := range uids {
			if err := b.Delete([]byte(u)); err != nil {
				return err
			}
		}
		return nil
	})
}

// Load returns every record that can be read; the others are quarantined
// (see Quarantined), never an error that stops the service.
func (s *Store) Load() ([]Record, error) {
	var (
		out []Record
		bad []Quarantined
	)
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			var r Record
			switch err := json.Unmarshal(v, &r); {
			case err != nil:
				bad = append(bad, Quarantined{UID: string(k), Reason: fmt.Sprintf("record is not JSON: %v", err)})
			case r.UID != string(k):
				bad = append(bad, Quarantined{UID: string(k), Reason: fmt.Sprintf("record's uid %q is not its key", r.UID)})
			default:
				out = append(out, r)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	for _, q := range bad {
		if err := s.Quarantine(q.UID, q.Reason); err != nil {
			return nil, fmt.Errorf("quarantine record %s: %w", q.UID, err)
		}
	}
	return out, nil
}
