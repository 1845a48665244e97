package envvars

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// fileKeyValue is a fileKeyRef's value (the EnvFiles feature, beta and on
// by default since Kubernetes 1.35): the key's value in the env file at
// ref.Path inside the pod's volume ref.VolumeName, read when the container
// is created, so an init container can write it. As the kubelet's: a
// missing volume, an unreadable file or a malformed one is an error even
// when the reference is optional; a key that is missing or empty is
// skipped when optional and an error otherwise. The path cannot leave the
// volume (os.Root refuses "..", absolute paths and escaping symlinks).
func fileKeyValue(ref *corev1.FileKeySelector, volumes map[string]string) (string, bool, error) {
	dir, ok := volumes[ref.VolumeName]
	if !ok {
		return "", false, fmt.Errorf("cannot find the volume %q referenced by FileKeyRef", ref.VolumeName)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", false, fmt.Errorf("volume %q: %w", ref.VolumeName, err)
	}
	defer func() { _ = root.Close() }()
	f, err := root.Open(ref.Path)
	if err != nil {
		return "", false, fmt.Errorf("env file %q in volume %q: %w", ref.Path, ref.VolumeName, err)
	}
	defer func() { _ = f.Close() }()
	v, err := LookupEnvFile(f, ref.Key)
	if err != nil {
		return "", false, fmt.Errorf("env file %q in volume %q: %w", ref.Path, ref.VolumeName, err)
	}
	if v == "" {
		if ref.Optional != nil && *ref.Optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("environment variable key %q not found in file %q of volume %q", ref.Key, ref.Path, ref.VolumeName)
	}
	return v, true, nil
}

// LookupEnvFile returns the value of key in an env file, "" when it is not
// there. The format is the strict one the kubelet reads for fileKeyRef, a
// subset of POSIX shell assignments:
//
//	# a comment line; blank lines are skipped; leading blanks are ignored
//	NAME='value'           single quotes required, taken literally
//	NAME='line one
//	line two'              a value may span lines
//	NAME='value'  # note   a comment may follow the closing quote
//	NAME= 'value'          a blank after '=' makes the value empty
//
// A blank before '=', a missing '=' or name, an unquoted value, text after
// the closing quote or an unclosed quote is an error, for the lines read
// until key is found (the first assignment of key wins).
func LookupEnvFile(r io.Reader, key string) (string, error) {
	sc := bufio.NewScanner(r)
	n := 0
	next := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		n++
		return sc.Text(), true
	}
	for {
		raw, ok := next()
		if !ok {
			break
		}
		line := strings.TrimLeft(raw, " \t")
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, found := strings.Cut(line, "=")
		switch {
		case !found:
			return "", fmt.Errorf("line %d: no '='", n)
		case strings.TrimRight(name, " \t") == "":
			return "", fmt.Errorf("line %d: no variable name", n)
		case strings.TrimRight(name, " \t") != name:
			return "", fmt.Errorf("line %d: blank before '='", n)
		case rest != "" && (rest[0] == ' ' || rest[0] == '\t'):
			// As in a shell, NAME= 'x' assigns the empty string.
			if name == key {
				return "", nil
			}
			continue
		case !strings.HasPrefix(rest, "'"):
			return "", fmt.Errorf("line %d: the value of %s is not in single quotes", n, name)
		}
		first := n
		var value strings.Builder
		body := rest[1:]
		for {
			end := strings.IndexByte(body, '\'')
			if end < 0 {
				value.WriteString(body)
				value.WriteByte('\n')
				if body, ok = next(); !ok {
					return "", fmt.Errorf("line %d: the quote opened here is never closed", first)
				}
				continue
			}
			value.WriteString(body[:end])
			if after := strings.TrimLeft(body[end+1:], " \t"); after != "" && after[0] != '#' {
				return "", fmt.Errorf("line %d: text after the closing quote", n)
			}
			break
		}
		if name == key {
			return value.String(), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", nil
}

// errNoVolumes is returned for a fileKeyRef on a node that set up no volumes.
var errNoVolumes = errors.New("fileKeyRef: this node has no volumes set up for the pod")
