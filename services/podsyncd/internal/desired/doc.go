// Package desired follows podconfig's Watch stream and turns it into calls on
// a Handler, resuming from the last sequence after podconfig restarts so no
// update is lost, and turning a resync snapshot into the ADD, UPDATE and
// REMOVE calls that bring the local view in line with it.
package desired
