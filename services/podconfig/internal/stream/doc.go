// Package stream turns the merged updates of package merge into podconfig's
// resumable Watch stream.
//
// Every update gets the next sequence number and is kept in a bounded ring.
// A watcher opens with a full snapshot (one SET per source, resync=true) or,
// when it resumes after a sequence still in the ring, with exactly the
// updates it missed. Each watcher has a bounded queue; a watcher that falls
// behind is not waited for: its queue is dropped and its next read is a new
// snapshot, so the merge and the other watchers never stall.
//
// Sequence numbers start at the process's start time in microseconds, so a
// number remembered from an earlier podconfig process is always older than
// the ring and gets a snapshot.
//
//	s := stream.New(storage)
//	s.Apply("file", pods)            // merge and publish
//	w := s.Watch(0)                  // snapshot first
//	defer w.Close()
//	ev, err := w.Next(ctx)
package stream
