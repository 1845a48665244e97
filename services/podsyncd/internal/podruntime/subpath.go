package podruntime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/services/podsyncd/internal/envvars"
)

// mountSubPath is the path inside the volume a volumeMount names: subPath,
// or subPathExpr expanded from the container's environment. It is refused,
// with the kubelet's messages, when it is absolute or steps up with "..";
// "" mounts the whole volume.
func mountSubPath(vm *corev1.VolumeMount, env map[string]string) (string, error) {
	sub := vm.SubPath
	if vm.SubPathExpr != "" {
		var err error
		if sub, err = envvars.ExpandSubPath(vm.SubPathExpr, env); err != nil {
			return "", err
		}
	}
	if sub == "" {
		return "", nil
	}
	if filepath.IsAbs(sub) {
		return "", fmt.Errorf("error SubPath `%s` must not be an absolute path", sub)
	}
	if slices.Contains(strings.Split(filepath.ToSlash(sub), "/"), "..") {
		return "", fmt.Errorf("unable to provision SubPath `%s`: must not contain '..'", sub)
	}
	return sub, nil
}

// errOutsideVolume is a subPath that resolves (through symlinks) outside its
// volume.
var errOutsideVolume = errors.New("path escapes the volume")

// prepareSubPath returns the host path of sub inside the volume at root,
// creating it as a directory when it does not exist yet, as the kubelet does
// before handing it to the runtime (which would otherwise create it with its
// own mode): each new directory gets the volume root's permissions, its
// setgid bit (so an fsGroup keeps being inherited) and its sticky bit (a
// tmpfs root's 1777). Symlinks are followed
// only while they stay inside the volume, both for the part that exists and
// for the result, so a container cannot point a later mount at the host.
func prepareSubPath(root, sub string) (string, error) {
	base, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	info, err := os.Stat(base)
	if err != nil {
		return "", err
	}
	perm := info.Mode() & (os.ModePerm | os.ModeSetgid | os.ModeSticky)
	// The longest prefix of sub that exists, resolved.
	parts := strings.Split(filepath.Clean(sub), string(filepath.Separator))
	cur, i := base, 0
	for ; i < len(parts); i++ {
		next := filepath.Join(cur, parts[i])
		if _, err := os.Lstat(next); errors.Is(err, os.ErrNotExist) {
			break
		} else if err != nil {
			return "", err
		}
		if cur, err = filepath.EvalSymlinks(next); err != nil {
			return "", err
		}
		if !within(base, cur) {
			return "", errOutsideVolume
		}
	}
	for ; i < len(parts); i++ {
		cur = filepath.Join(cur, parts[i])
		if err := os.Mkdir(cur, perm.Perm()); err != nil && !errors.Is(err, os.ErrExist) {
			return "", err
		}
		// Mkdir is subject to the umask; the kubelet sets the mode exactly.
		if err := os.Chmod(cur, perm); err != nil {
			return "", err
		}
		real, err := filepath.EvalSymlinks(cur)
		if err != nil {
			return "", err
		}
		if !within(base, real) {
			return "", errOutsideVolume
		}
		cur = real
	}
	return cur, nil
}

// within reports whether path is base or below it (both resolved).
func within(base, path string) bool {
	rel, err := filepath.Rel(base, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
