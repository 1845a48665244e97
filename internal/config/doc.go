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
// Unknown keys in the file are errors naming the file, line and key.
package config
