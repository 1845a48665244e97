// Package criexec runs a command in a container through the CRI's ExecSync
// with the deadline k8s.io/cri-client gives the call: the command's own
// timeout plus RequestAllowance. The runtime enforces the command's timeout
// and answers DeadlineExceeded itself; the call's deadline only bounds a
// runtime that does not answer, so a probe or hook whose command runs up to
// its timeout is not cut off by the transport first. Exec probes and exec
// lifecycle hooks use it.
//
//	resp, err := criexec.ExecSync(ctx, rt, containerID, []string{"cat", "/ready"}, time.Second)
package criexec
