package kernelparams

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
)

// Kubelet are the kernel parameters the upstream kubelet sets when it
// starts with protectKernelDefaults false.
var Kubelet = []string{
	utilsysctl.VMOvercommitMemory, utilsysctl.VMPanicOnOOM, utilsysctl.KernelPanic,
	utilsysctl.KernelPanicOnOops, utilsysctl.RootMaxKeys, utilsysctl.RootMaxBytes,
}

// Values are kernel parameters by their /proc/sys path name
// (vm/overcommit_memory).
type Values map[string]int

// Read reads the named parameters.
func Read(names []string) (Values, error) {
	s := utilsysctl.New()
	out := Values{}
	for _, n := range names {
		v, err := s.GetSysctl(n)
		if err != nil {
			return nil, fmt.Errorf("read kernel parameter %s: %w", n, err)
		}
		out[n] = v
	}
	return out, nil
}

// Write sets the values that differ from now.
func Write(want Values) error {
	s := utilsysctl.New()
	var errs []error
	for n, v := range want {
		cur, err := s.GetSysctl(n)
		if err == nil && cur == v {
			continue
		}
		if err := s.SetSysctl(n, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%d: %w", n, v, err))
		}
	}
	return errors.Join(errs...)
}

// Diff says which of want differ from now, "name=now (was want)" each;
// empty when all are as wanted.
func Diff(want Values) string {
	names := want.names()
	now, err := Read(names)
	if err != nil {
		return err.Error()
	}
	var diff []string
	for _, n := range names {
		if now[n] != want[n] {
			diff = append(diff, fmt.Sprintf("%s=%d (was %d)", dotted(n), now[n], want[n]))
		}
	}
	return strings.Join(diff, ", ")
}

// String is the values as sysctl(8) lines (kernel.panic=1), sorted.
func (v Values) String() string {
	var b strings.Builder
	for _, n := range v.names() {
		fmt.Fprintf(&b, "%s=%d\n", dotted(n), v[n])
	}
	return b.String()
}

// Parse reads String's format back.
func Parse(s string) (Values, error) {
	out := Values{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, val, ok := strings.Cut(line, "=")
		n, err := strconv.Atoi(val)
		if !ok || err != nil {
			return nil, fmt.Errorf("kernel parameters: bad line %q (want name=integer)", line)
		}
		out[strings.ReplaceAll(k, ".", "/")] = n
	}
	return out, nil
}

func (v Values) names() []string {
	names := make([]string, 0, len(v))
	for n := range v {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func dotted(n string) string { return strings.ReplaceAll(n, "/", ".") }
