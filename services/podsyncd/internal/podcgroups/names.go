package podcgroups

import (
	"fmt"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Drivers a runtime can report (CRI RuntimeConfig, Docker's CgroupDriver).
const (
	DriverCgroupfs = "cgroupfs"
	DriverSystemd  = "systemd"
)

// Name is a cgroup as the kubelet names it internally: its components from
// the root, e.g. {"kubepods", "burstable", "pod<uid>"}. Driver turns it into
// the path on the host.
type Name []string

// Child returns n with one more component.
func (n Name) Child(c string) Name { return append(append(Name{}, n...), c) }

// Cgroupfs is n as a cgroupfs path, "/kubepods/burstable/pod<uid>".
func (n Name) Cgroupfs() string { return "/" + path.Join(n...) }

// Systemd is n as the path of nested systemd slices, each named after all
// the components up to it joined by "-", with "-" inside a component
// written "_": {"kubepods", "burstable", "pod1-2"} is
// "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice".
func (n Name) Systemd() string {
	if len(n) == 0 {
		return "/"
	}
	var b strings.Builder
	prefix := ""
	for _, c := range n {
		prefix += strings.ReplaceAll(c, "-", "_")
		b.WriteString("/" + prefix + ".slice")
		prefix += "-"
	}
	return b.String()
}

// ParseCgroupfs turns a cgroupfs path ("/", "/a/b") into a Name.
func ParseCgroupfs(p string) (Name, error) {
	if p == "" || p == "/" {
		return Name{}, nil
	}
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("cgroup root %q: want an absolute cgroupfs path", p)
	}
	var n Name
	for _, c := range strings.Split(strings.Trim(path.Clean(p), "/"), "/") {
		if c == ".." || c == "." {
			return nil, fmt.Errorf("cgroup root %q: %q is not a cgroup name", p, c)
		}
		n = append(n, c)
	}
	return n, nil
}

// podPrefix starts every pod cgroup's last component.
const podPrefix = "pod"

// podComponent is the pod cgroup's own component, "pod<uid>".
func podComponent(uid types.UID) string { return podPrefix + string(uid) }

// podUID is the pod UID in a host directory name below a QoS cgroup
// ("pod<uid>" or, with systemd, "<parent>-pod<uid_with_underscores>.slice"),
// or "" when the directory is not a pod's.
func podUID(driver, dir string) types.UID {
	if driver == DriverSystemd {
		if !strings.HasSuffix(dir, ".slice") {
			return ""
		}
		dir = strings.TrimSuffix(dir, ".slice")
		dir = dir[strings.LastIndex(dir, "-")+1:]
		dir = strings.ReplaceAll(dir, "_", "-")
	}
	if !strings.HasPrefix(dir, podPrefix) || len(dir) == len(podPrefix) {
		return ""
	}
	return types.UID(strings.TrimPrefix(dir, podPrefix))
}
