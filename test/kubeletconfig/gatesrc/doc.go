// Package gatesrc renders a feature gate's known features and their
// dependencies as the Go source of internal/kubeletconfig's table of the
// kubelet's feature gates (zz_generated_featuregates.go): cmd/kubeletgates
// writes it from the kubelet's own gate and the tests compare it with the
// committed file and with the gate microlet builds from that file.
package gatesrc
