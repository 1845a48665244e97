// Package memtrim gives back, once start-up is over, the memory a
// long-running microlet process only needed to start: the heap start-up
// left free (debug.FreeOSMemory), and the pages of its own executable that
// package initialisation, flag parsing and the first connections touched
// (madvise MADV_PAGEOUT on the executable's read-only mappings). Those pages
// are clean file pages; the ones the process still uses fault back in from
// the page cache, so what stays resident is the idle working set rather
// than everything start-up ever read. docs/footprint.md has the numbers.
//
//	env.OnReady(func() { memtrim.AfterStartup(ctx, log) })
package memtrim
