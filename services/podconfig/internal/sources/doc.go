// Package sources are podconfig's pod sources. Each one delivers the complete
// set of pods it currently has to a Sink every time that set may have
// changed; package merge works out what changed.
//
//   - File watches a manifest directory (or one file) with fsnotify and
//     re-lists it periodically.
//   - HTTP polls a manifest URL.
//   - API lists and watches the pods bound to this node with a client-go
//     Reflector.
//
// Sources never fail for bad input: a bad manifest is reported through the
// Reporter with its path and reason and skipped, and a source whose input is
// unreachable keeps its last good set and retries.
package sources
