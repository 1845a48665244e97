package podruntime

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestMountSubPath(t *testing.T) {
	env := map[string]string{"POD_NAME": "foo", "ABS": "/tmp", "UP": "..", "ANNOTATION": ""}
	tests := []struct {
		name    string
		vm      corev1.VolumeMount
		want    string
		wantErr string
	}{
		{"whole volume", corev1.VolumeMount{}, "", ""},
		{"subPath", corev1.VolumeMount{SubPath: "a/b"}, "a/b", ""},
		{"subPathExpr", corev1.VolumeMount{SubPathExpr: "logs/$(POD_NAME)"}, "logs/foo", ""},
		{"absolute expansion", corev1.VolumeMount{SubPathExpr: "$(ABS)"}, "", "error SubPath `/tmp` must not be an absolute path"},
		{"backsteps from an expansion", corev1.VolumeMount{SubPathExpr: "$(UP)"}, "", "unable to provision SubPath `..`: must not contain '..'"},
		{"backsteps inside", corev1.VolumeMount{SubPath: "a/../../b"}, "", "unable to provision SubPath `a/../../b`: must not contain '..'"},
		{"empty variable", corev1.VolumeMount{SubPathExpr: "$(ANNOTATION)/$(POD_NAME)"}, "", "missing value for ANNOTATION"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mountSubPath(&tc.vm, env)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("= %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestPrepareSubPath(t *testing.T) {
	root := filepath.Join(t.TempDir(), "vol")
	if err := os.Mkdir(root, 0o777); err != nil {
		t.Fatal(err)
	}
	// A tmpfs emptyDir's root with an fsGroup: 1777 plus setgid; each new
	// directory of the subPath gets all of it (the conformance spec wants
	// dgtrwxrwxrwx).
	rootMode := 0o777 | os.ModeSetgid | os.ModeSticky
	if err := os.Chmod(root, rootMode); err != nil {
		t.Fatal(err)
	}
	got, err := prepareSubPath(root, "mypath/foo")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "mypath", "foo"); got != want {
		t.Fatalf("host path %q, want %q", got, want)
	}
	for _, dir := range []string{filepath.Join(root, "mypath"), got} {
		info, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if m := info.Mode() & (os.ModePerm | os.ModeSetgid | os.ModeSticky); m != rootMode {
			t.Errorf("%s mode %v, want the volume root's %v", dir, m, rootMode)
		}
	}
	// An existing file (a configMap key through the atomic writer's links)
	// resolves to the real file.
	if err := os.MkdirAll(filepath.Join(root, "..data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "..data", "key"), []byte("v"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/key", filepath.Join(root, "key")); err != nil {
		t.Fatal(err)
	}
	if got, err := prepareSubPath(root, "key"); err != nil || got != filepath.Join(root, "..data", "key") {
		t.Fatalf("= %q, %v", got, err)
	}
	// A symlink out of the volume is refused, and nothing is made outside.
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	if _, err := prepareSubPath(root, "escape/x"); !errors.Is(err, errOutsideVolume) {
		t.Fatalf("err = %v, want errOutsideVolume", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); !os.IsNotExist(err) {
		t.Fatalf("made a directory outside the volume: %v", err)
	}
}
