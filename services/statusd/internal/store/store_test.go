package store

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
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
