// Package criexec runs a command in a container through cri-client's
// ExecSync, which gives the call the deadline the kubelet gives it (the
// command's own timeout plus the runtime request timeout) and reports a
// non-zero exit as an error; here that exit is a Result with its code and
// output again, so exec probes and exec lifecycle hooks tell "the command
// failed" from "the runtime failed" as before.
//
//	res, err := criexec.ExecSync(ctx, rt, containerID, []string{"cat", "/ready"}, time.Second)
//	if err == nil && res.ExitCode != 0 { ... res.Output() ... }
package criexec
