// Package kubeletconfig reads the kubelet's own configuration file (a
// KubeletConfiguration, kubelet.config.k8s.io/v1beta1) for `microlet run`.
//
// Decode recognises and decodes the file strictly with the published
// k8s.io/kubelet types; SetDefaults and Validate reproduce the kubelet's
// defaulting (pkg/kubelet/apis/config/v1beta1) and validation
// (pkg/kubelet/apis/config/validation) of Kubernetes v1.36.3, which are not
// published as libraries, with the kubelet's feature gates (FeatureGate, a
// table generated from the kubelet); Fields is the table of every top-level
// field with the microlet service that owns it and, where microlet
// implements it, the service flags it becomes; Translate turns a configuration into those
// per-service arguments and lists the set, unimplemented fields for the
// start-up warning. Flags holds the kubelet command-line flags `microlet run`
// accepts in this mode and the kubelet's full flag list, so a kubelet flag
// microlet lacks is refused by name.
package kubeletconfig
