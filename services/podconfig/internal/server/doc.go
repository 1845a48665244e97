// Package server is the podconfig service: its configuration, its gRPC API
// and the sources it runs.
//
// It starts the configured sources (file when manifest_dir is set, http when
// manifest_url is set, api when a kubeconfig is given), feeds their sets
// through package stream, and serves PodConfigService: Watch (resumable,
// snapshot first), ListPods and SourcesReady.
package server
