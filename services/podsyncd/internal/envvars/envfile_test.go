package envvars

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestLookupEnvFile(t *testing.T) {
	file := "# settings\n\n  A='one'\nB='two' # note\nC='multi\nline'\nEMPTY=''\nBLANK= 'x'\nA='again'\n"
	for _, tc := range []struct {
		file, key, want, err string
	}{
		{file: file, key: "A", want: "one"},
		{file: file, key: "B", want: "two"},
		{file: file, key: "C", want: "multi\nline"},
		{file: file, key: "EMPTY", want: ""},
		{file: file, key: "BLANK", want: ""},
		{file: file, key: "MISSING", want: ""},
		{file: "CONFIG_1='value1'\r\nCONFIG_2='value2'\r\n", key: "CONFIG_2", want: "value2"},
		{file: "A=one\n", key: "A", err: "not in single quotes"},
		{file: "A ='one'\n", key: "A", err: "blank before '='"},
		{file: "='one'\n", key: "A", err: "no variable name"},
		{file: "just text\n", key: "A", err: "no '='"},
		{file: "A='one' trailing\n", key: "A", err: "after the closing quote"},
		{file: "A='one\n", key: "A", err: "never closed"},
		{file: "A='one'\nbad\n", key: "A", want: "one"}, // read only until the key is found
	} {
		got, err := LookupEnvFile(strings.NewReader(tc.file), tc.key)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q in %q: err %v, want %q", tc.key, tc.file, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q in %q: %v", tc.key, tc.file, err)
		case got != tc.want:
			t.Errorf("%q in %q = %q, want %q", tc.key, tc.file, got, tc.want)
		}
	}
}

func TestFileKeyValue(t *testing.T) {
	vol := t.TempDir()
	if err := os.WriteFile(filepath.Join(vol, "config.env"), []byte("CONFIG_1='value1'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "secret.env")
	if err := os.WriteFile(outside, []byte("S='leaked'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(vol, "link.env")); err != nil {
		t.Fatal(err)
	}
	vols := map[string]string{"config": vol}
	yes := true
	for _, tc := range []struct {
		name   string
		ref    corev1.FileKeySelector
		want   string
		wantOK bool
		err    bool
	}{
		{name: "found", ref: corev1.FileKeySelector{VolumeName: "config", Path: "config.env", Key: "CONFIG_1"}, want: "value1", wantOK: true},
		{name: "missing key", ref: corev1.FileKeySelector{VolumeName: "config", Path: "config.env", Key: "X"}, err: true},
		{name: "missing key, optional", ref: corev1.FileKeySelector{VolumeName: "config", Path: "config.env", Key: "X", Optional: &yes}},
		{name: "missing file, optional", ref: corev1.FileKeySelector{VolumeName: "config", Path: "none.env", Key: "X", Optional: &yes}, err: true},
		{name: "unknown volume", ref: corev1.FileKeySelector{VolumeName: "other", Path: "config.env", Key: "CONFIG_1"}, err: true},
		{name: "escape by ..", ref: corev1.FileKeySelector{VolumeName: "config", Path: "../" + filepath.Base(outside), Key: "S"}, err: true},
		{name: "escape by symlink", ref: corev1.FileKeySelector{VolumeName: "config", Path: "link.env", Key: "S"}, err: true},
	} {
		got, ok, err := fileKeyValue(&tc.ref, vols)
		if (err != nil) != tc.err || got != tc.want || ok != tc.wantOK {
			t.Errorf("%s: %q, %v, %v; want %q, %v, error %v", tc.name, got, ok, err, tc.want, tc.wantOK, tc.err)
		}
	}
}
