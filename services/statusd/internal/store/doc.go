// Package store is statusd's durable record of accepted statuses: one bbolt
// file in the data directory. Put returns only after the record is fsynced,
// and concurrent Puts of different pods share one transaction and one fsync
// (bbolt's Batch), so durability costs little under load.
//
//	s, _ := store.Open(filepath.Join(dataDir, "statusd.db"))
//	_ = s.Put(store.Record{UID: "u", Version: 3, ...})
//	recs, _ := s.Load()
package store
