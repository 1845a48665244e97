package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

var bucket = []byte("pods")

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
	db *bolt.DB
}

// Open opens (creating if needed) the database file at path.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
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
	return &Store{db: db}, nil
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

// Load returns every record.
func (s *Store) Load() ([]Record, error) {
	var out []Record
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("record %s: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}
