package server

import "github.com/microlet/microlet/services/cloudsyncd/internal/cloud"

// Cloud returns the provider settings in the form package cloud takes, for
// the cluster-wide controllers.
func (c *Config) Cloud() cloud.Config {
	return cloud.Config{
		Provider:               c.CloudProvider,
		CloudConfig:            c.CloudConfig,
		NodeName:               c.NodeName,
		StaticFile:             c.StaticFile,
		MetadataEndpoint:       c.MetadataEndpoint,
		MetadataTokenTTL:       c.MetadataTokenTTL,
		MetadataRequestTimeout: c.MetadataRequestTimeout,
		ExternalEndpoint:       c.ExternalEndpoint,
		Local:                  c.Settings,
	}
}
