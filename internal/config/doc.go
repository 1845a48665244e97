// Package config loads a service's configuration from defaults, an optional
// YAML file and command-line flags, in that order of precedence (flag beats
// file beats default). One struct declares everything: the `yaml` tag names
// the file key, the `flag` tag the flag, `usage` its help. Defaults are the
// struct's values before Load, so they are written in one place.
//
//	type Config struct {
//		service.Common `yaml:",inline"`
//		SyncFrequency time.Duration `yaml:"sync_frequency" flag:"sync-frequency" usage:"how often to refresh"`
//	}
//	cfg := &Config{SyncFrequency: 10 * time.Second}
//	err := config.Load("cloudsyncd", cfg, os.Args[1:])
//
// A struct embedded, or a struct field tagged `yaml:",inline"`, contributes
// its keys and flags as if they were the service's own: a subsystem's config
// type lives in its package and the service config inlines it. Its checks
// report field errors (k8s.io/apimachinery/pkg/util/validation/field), with
// Positive and NotNegative the one wording of the common range checks.
//
// Unknown keys in the file are errors naming the file, line and key.
package config
