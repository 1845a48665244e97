package kubeletdropin

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/microlet/microlet/internal/testenv/node"
)

const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// TestBadInput runs `microlet run` with bad KubeletConfiguration files and
// kubelet flags microlet lacks: exit status 2 and the kubelet's messages,
// every validation error at once.
func TestBadInput(t *testing.T) {
	bin := filepath.Join(node.Binaries(t), "microlet")
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("good.yaml", header+"failCgroupV1: false\n")
	for name, tc := range map[string]struct {
		args []string
		want []string
	}{
		"unknown field": {[]string{"--config", file("unknown.yaml", header+"maxPod: 3\n")},
			[]string{"failed to load Kubelet config file ", `strict decoding error: unknown field "maxPod"`}},
		"invalid values": {[]string{"--config", file("invalid.yaml", header+"failCgroupV1: false\nmaxPods: -1\nport: 70000\nnodeLeaseDurationSeconds: -4\n")},
			[]string{"failed to validate kubelet configuration, error: [",
				"invalid configuration: maxPods (--max-pods) -1 must not be a negative number",
				"invalid configuration: port (--port) 70000 must be between 1 and 65535, inclusive",
				"invalid configuration: nodeLeaseDurationSeconds must be greater than 0"}},
		"kubelet flag microlet lacks": {[]string{"--config", good, "--enforce-node-allocatable=pods"},
			[]string{"kubelet flag --enforce-node-allocatable is not supported by microlet"}},
		"no such flag": {[]string{"--config", good, "--no-such-flag"},
			[]string{"unknown flag: --no-such-flag"}},
		"bad flag value": {[]string{"--config", good, "--max-pods=lots"},
			[]string{`invalid argument "lots" for "--max-pods"`}},
		"flag makes it invalid": {[]string{"--config", good, "--max-pods=-2"},
			[]string{"invalid configuration: maxPods (--max-pods) -2 must not be a negative number"}},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"run"}, tc.args...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("exit: %v, want status 2; stderr:\n%s", err, stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
		})
	}
}
