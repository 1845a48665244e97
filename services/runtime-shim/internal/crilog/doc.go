// Package crilog writes container output in the CRI log format the kubelet
// and `kubectl logs` read:
//
//	2016-10-06T00:17:09.669794202Z stdout F the line
//	2016-10-06T00:17:09.669794203Z stderr P a partial line ...
//
// Docker keeps its own json-file log; the runtime-shim follows it (with
// timestamps) and copies each line into a real file at the path the CRI
// caller asked for, rather than symlinking Docker's file the way cri-dockerd
// does, so rotation with ReopenContainerLog works. A File remembers the last
// timestamp written so a follower restarted after a shim restart resumes
// without duplicating lines.
package crilog
