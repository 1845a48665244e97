package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestCredentialsCommandErrors: no kubeconfig is a usage error; --check of
// a missing or bootstrap-less expired kubeconfig is exit 1 with one line
// naming the file; an unreadable bootstrap kubeconfig is one line naming it.
func TestCredentialsCommandErrors(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"credentials"}, 2, "--kubeconfig is required"},
		{[]string{"credentials", "--check", "--kubeconfig=" + kc}, 1, "kubeconfig " + kc + ": it does not exist"},
		{[]string{"credentials", "--node-name=n1", "--kubeconfig=" + kc, "--cert-dir=" + dir, "--bootstrap-kubeconfig=" + filepath.Join(dir, "nope")}, 1, "bootstrap kubeconfig " + filepath.Join(dir, "nope")},
		{[]string{"credentials", "--node-name=n1", "--kubeconfig=" + kc, "--cert-dir=" + dir}, 1, "no bootstrap_kubeconfig"},
	} {
		var stdout, stderr bytes.Buffer
		code := Execute(tc.args, &stdout, &stderr)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		last := lines[len(lines)-1]
		if code != tc.code || !strings.HasPrefix(last, "microlet: ") || !strings.Contains(last, tc.want) {
			t.Errorf("%v: exit %d, last line %q; want exit %d and a line containing %q", tc.args, code, last, tc.code, tc.want)
		}
	}
}
