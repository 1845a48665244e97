// Package merge is podconfig's pod storage: it takes the full set of pods of
// one source at a time and works out, with the kubelet's podStorage
// semantics, what changed since that source's previous set.
//
//	s := merge.New()
//	ups := s.Merge("file", pods) // REMOVE, ADD, UPDATE, DELETE, RECONCILE, in that order
//
// A pod is ADDed when its UID is new to its source, UPDATEd on a semantic
// change (spec, labels, deletion timestamp or grace period, annotations other
// than the local config.* ones), DELETEd when a deletion timestamp appears,
// REMOVEd when it leaves its source and RECONCILEd when only its status
// changed. Pods with the same namespace and name as an earlier pod of the
// same set are refused. Every pod handed out is a deep copy.
package merge
