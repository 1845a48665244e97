package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type common struct {
	RunDir string `yaml:"run_dir" flag:"run-dir" usage:"run dir"`
}

// part is a subsystem's own config, inlined under a field name.
type part struct {
	Period time.Duration `yaml:"part_period" flag:"part-period"`
}

type testConfig struct {
	common   `yaml:",inline"`
	Part     part              `yaml:",inline"`
	Interval time.Duration     `yaml:"interval" flag:"interval"`
	Workers  int               `yaml:"workers" flag:"workers"`
	Labels   map[string]string `yaml:"labels" flag:"labels"`
	Taints   []string          `yaml:"taints" flag:"taints"`
	Debug    bool              `yaml:"debug" flag:"debug"`
	FileOnly string            `yaml:"file_only"`
}

func defaults() *testConfig {
	return &testConfig{common: common{RunDir: "/run/x"}, Part: part{Period: time.Minute}, Interval: 10 * time.Second, Workers: 4}
}

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrecedence(t *testing.T) {
	file := write(t, "run_dir: /from/file\ninterval: 30s\nworkers: 8\ntaints: [a, b]\nfile_only: yes-file\npart_period: 2m\n")
	tests := []struct {
		name string
		args []string
		want testConfig
	}{
		{"defaults", nil, testConfig{common: common{"/run/x"}, Part: part{time.Minute}, Interval: 10 * time.Second, Workers: 4}},
		{"flags", []string{"--workers=2", "--labels=a=b", "--debug", "--part-period=3s"}, testConfig{common: common{"/run/x"}, Part: part{3 * time.Second}, Interval: 10 * time.Second, Workers: 2, Labels: map[string]string{"a": "b"}, Debug: true}},
		{"file", []string{"--config", file}, testConfig{common: common{"/from/file"}, Part: part{2 * time.Minute}, Interval: 30 * time.Second, Workers: 8, Taints: []string{"a", "b"}, FileOnly: "yes-file"}},
		{"flag beats file", []string{"--config", file, "--workers=1", "--run-dir=/flag", "--taints=c", "--part-period=4s"}, testConfig{common: common{"/flag"}, Part: part{4 * time.Second}, Interval: 30 * time.Second, Workers: 1, Taints: []string{"c"}, FileOnly: "yes-file"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaults()
			if err := Load("t", cfg, tc.args); err != nil {
				t.Fatal(err)
			}
			if cfg.RunDir != tc.want.RunDir || cfg.Part != tc.want.Part || cfg.Interval != tc.want.Interval || cfg.Workers != tc.want.Workers ||
				cfg.Debug != tc.want.Debug || cfg.FileOnly != tc.want.FileOnly ||
				strings.Join(cfg.Taints, ",") != strings.Join(tc.want.Taints, ",") || len(cfg.Labels) != len(tc.want.Labels) {
				t.Fatalf("got %+v, want %+v", *cfg, tc.want)
			}
		})
	}
}

func TestErrorsNameTheProblem(t *testing.T) {
	tests := []struct {
		name string
		body string
		args []string
		want string
	}{
		{name: "unknown key", body: "run_dir: /a\nbogus: 1\n", want: "line 2: field bogus not found"},
		{name: "bad type", body: "workers: many\n", want: "line 1"},
		{name: "bad flag", args: []string{"--workers=x"}, want: "workers"},
		{name: "unknown flag", args: []string{"--nope"}, want: "nope"},
		{name: "stray argument", args: []string{"extra"}, want: `unexpected argument "extra"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.body != "" {
				args = append([]string{"--config", write(t, tc.body)}, args...)
			}
			err := Load("t", defaults(), args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
