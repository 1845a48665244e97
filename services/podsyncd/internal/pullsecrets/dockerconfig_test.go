package pullsecrets

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"
)

// TestDockerConfigFiles follows the kubelet's search: the first
// config.json that parses, in directory order, wins over every .dockercfg;
// a broken file is skipped; the result is cached for the lifetime.
func TestDockerConfigFiles(t *testing.T) {
	root, wd, home := t.TempDir(), t.TempDir(), t.TempDir()
	write := func(dir, name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	clk := testclock.NewFakeClock(time.Now())
	d := &DockerConfigFiles{
		JSONDirs: []string{root, wd, filepath.Join(home, ".docker")},
		CfgDirs:  []string{root, wd, home},
		Lifetime: time.Minute,
		Clock:    clk,
		Log:      slog.Default(),
	}
	user := func() string {
		cfg := d.Provide(context.Background(), "reg.io/app")
		return cfg["reg.io"].Username
	}
	if got := user(); got != "" {
		t.Fatalf("no files: user %q", got)
	}

	write(root, ".dockercfg", `{"reg.io":{"username":"legacy-root","password":"pw"}}`)
	write(wd, "config.json", `{"auths":{"reg.io":{"username":"json-wd","password":"pw"}}}`)
	if got := user(); got != "" {
		t.Errorf("within the lifetime the files were read again (user %q)", got)
	}
	clk.Step(2 * time.Minute)
	if got := user(); got != "json-wd" {
		t.Errorf("config.json in the working dir vs .dockercfg in the root dir: user %q, want json-wd", got)
	}

	write(root, "config.json", `{"auths":{"reg.io":{"username":"json-root","password":"pw"}}}`)
	clk.Step(2 * time.Minute)
	if got := user(); got != "json-root" {
		t.Errorf("config.json in the root dir first: user %q, want json-root", got)
	}

	write(root, "config.json", `{"auths":`)
	clk.Step(2 * time.Minute)
	if got := user(); got != "json-wd" {
		t.Errorf("a broken config.json is skipped: user %q, want json-wd", got)
	}

	for _, f := range []string{filepath.Join(root, "config.json"), filepath.Join(wd, "config.json")} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	clk.Step(2 * time.Minute)
	if got := user(); got != "legacy-root" {
		t.Errorf("no config.json left: user %q, want legacy-root from .dockercfg", got)
	}

	var k Keyring
	if err := k.Add(d.Provide(context.Background(), "reg.io/app")); err != nil {
		t.Fatal(err)
	}
	if got := k.Lookup("reg.io/app"); len(got) != 1 || got[0].Secret != nil {
		t.Errorf("node docker config in a keyring: %+v, want one node-wide credential", got)
	}
}
