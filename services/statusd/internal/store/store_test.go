package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestPutLoadDeleteReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "statusd.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Put(Record{UID: fmt.Sprintf("u%d", i), Name: "p", Version: uint64(i + 1), Status: []byte{1, 2}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := s.Delete("u0", "u1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	recs, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 48 {
		t.Fatalf("%d records after reopen, want 48", len(recs))
	}
	if err := s.Put(Record{}); err == nil {
		t.Fatal("record without uid accepted")
	}
}

// A damaged file (garbage, or a database cut short) is moved aside and a
// fresh one opened; a record that does not decode is quarantined and the
// rest load.
// fill writes a store of 200 records at path, big enough to span many pages.
func fill(t *testing.T, path string) {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if err := s.Put(Record{UID: fmt.Sprintf("u%d", i), Status: make([]byte, 512)}); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
}

func TestCorruptFileAndRecords(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"garbage", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("not a database"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated", func(t *testing.T, path string) {
			fill(t, path)
			fi, _ := os.Stat(path)
			if err := os.Truncate(path, fi.Size()/3); err != nil {
				t.Fatal(err)
			}
		}},
		{"cut in half, then garbage (pages past the end: a SIGBUS if mapped)", func(t *testing.T, path string) {
			fill(t, path)
			b, _ := os.ReadFile(path)
			if err := os.WriteFile(path, append(b[:len(b)/2:len(b)/2], "garbage"...), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "statusd.db")
			tc.damage(t, path)
			s, err := Open(path)
			if err != nil {
				t.Fatalf("damaged store stops the service: %v", err)
			}
			defer func() { _ = s.Close() }()
			if s.MovedAside() == "" || !strings.HasPrefix(s.MovedAside(), path+".corrupt-") {
				t.Fatalf("moved aside to %q", s.MovedAside())
			}
			if _, err := os.Stat(s.MovedAside()); err != nil {
				t.Fatal(err)
			}
			if recs, err := s.Load(); err != nil || len(recs) != 0 {
				t.Fatalf("fresh store: %d records, %v", len(recs), err)
			}
			if err := s.Put(Record{UID: "new"}); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("record", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "statusd.db")
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Put(Record{UID: "good"}); err != nil {
			t.Fatal(err)
		}
		if err := s.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucket)
			if err := b.Put([]byte("bad"), []byte("{")); err != nil {
				return err
			}
			return b.Put([]byte("other"), []byte(`{"uid":"someone-else"}`))
		}); err != nil {
			t.Fatal(err)
		}
		recs, err := s.Load()
		if err != nil || len(recs) != 1 || recs[0].UID != "good" {
			t.Fatalf("load: %+v %v", recs, err)
		}
		q := s.Quarantined()
		if len(q) != 2 || q[0].UID != "bad" || !strings.Contains(q[0].Reason, "not JSON") || q[1].UID != "other" {
			t.Fatalf("quarantined %+v", q)
		}
		// Gone from the records for good, kept in the quarantine bucket.
		if recs, _ := s.Load(); len(recs) != 1 || len(s.Quarantined()) != 2 {
			t.Fatalf("second load: %+v, quarantined %+v", recs, s.Quarantined())
		}
		if err := s.db.View(func(tx *bolt.Tx) error {
			if v := tx.Bucket(quarantine).Get([]byte("bad")); !strings.HasSuffix(string(v), "\n{") {
				t.Errorf("quarantined record kept as %q", v)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
}
