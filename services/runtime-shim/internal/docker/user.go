package docker

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/container"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A container's user (ContainerStatus.user, which the kubelet puts in
// status.containerStatuses[].user): the identity its first process got
// from the runtime, with the groups Docker merged in from the image's
// /etc/group. Docker does not report it, so the shim reads it from
// /proc/<pid>/status the first time it is asked while the container runs
// and keeps it until the container is removed, so an exited container
// still reports the identity it ran with (for the life of the shim
// process; after a shim restart, an exited container it never saw running
// reports none).
//
// SupplementalGroups lists the primary group first, then the process's
// supplementary groups in the kernel's (ascending) order without it, as
// containerd reports them (`id -G`'s order).

// containerUser returns the user of ct: the one kept since it was first
// read, else read now if the container runs (the identity its process
// started with, so /proc is read once per container, not at every status
// call); nil when unknown.
func (b *Backend) containerUser(ct container.InspectResponse) *runtimeapi.ContainerUser {
	if u, ok := b.users.Load(ct.ID); ok {
		return proto.CloneOf(u.(*runtimeapi.ContainerUser))
	}
	if s := ct.State; s != nil && s.Running && s.Pid > 0 {
		if u, err := readProcUser(procRoot, s.Pid); err == nil {
			b.users.Store(ct.ID, u)
			return proto.CloneOf(u)
		}
	}
	return nil
}

// procRoot is the host's /proc: the shim sees the host's PID namespace, as
// it needs for the sandboxes' network namespaces.
const procRoot = "/proc"

// readProcUser reads the identity of process pid from <procRoot>/<pid>/status.
func readProcUser(procRoot string, pid int) (*runtimeapi.ContainerUser, error) {
	data, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "status"))
	if err != nil {
		return nil, err
	}
	return parseProcStatusUser(data)
}

// parseProcStatusUser takes the real UID and GID and the supplementary
// groups from a /proc/<pid>/status file.
func parseProcStatusUser(data []byte) (*runtimeapi.ContainerUser, error) {
	var (
		uid, gid         int64
		haveUID, haveGID bool
		groups           []int64
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(val)
		var err error
		switch key {
		case "Uid":
			if len(fields) == 0 {
				return nil, fmt.Errorf("proc status: empty Uid line")
			}
			uid, err = strconv.ParseInt(fields[0], 10, 64)
			haveUID = err == nil
		case "Gid":
			if len(fields) == 0 {
				return nil, fmt.Errorf("proc status: empty Gid line")
			}
			gid, err = strconv.ParseInt(fields[0], 10, 64)
			haveGID = err == nil
		case "Groups":
			for _, f := range fields {
				g, perr := strconv.ParseInt(f, 10, 64)
				if perr != nil {
					return nil, fmt.Errorf("proc status: Groups: %w", perr)
				}
				groups = append(groups, g)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("proc status: %s: %w", key, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !haveUID || !haveGID {
		return nil, fmt.Errorf("proc status: no Uid or Gid line")
	}
	sup := []int64{gid}
	for _, g := range groups {
		if !slices.Contains(sup, g) {
			sup = append(sup, g)
		}
	}
	return &runtimeapi.ContainerUser{Linux: &runtimeapi.LinuxContainerUser{Uid: uid, Gid: gid, SupplementalGroups: sup}}, nil
}
