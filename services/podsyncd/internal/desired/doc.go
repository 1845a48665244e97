// Package desired follows podconfig's Watch stream (through podconfig's
// client package, which resumes from the last sequence after a disconnect and
// skips pods that do not decode) and turns it into calls on a Handler,
// turning a resync snapshot into the ADD, UPDATE and REMOVE calls that bring
// the local view in line with it. Mirror pods are left out: they are the API
// copies of static pods and are never run.
package desired
