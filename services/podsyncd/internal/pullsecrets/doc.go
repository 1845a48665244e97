// Package pullsecrets turns a pod's image pull secrets into the CRI
// credentials of an image pull, as the kubelet's keyring does
// (pkg/credentialprovider): the secrets' registry entries
// (kubernetes.io/dockerconfigjson and kubernetes.io/dockercfg) are keys
// matched against the image's repository by host name glob (per
// dot-separated part), port and path prefix, the more specific keys first,
// with Docker Hub's aliases; every matching credential is a candidate.
package pullsecrets
