// Package credprovider runs the kubelet's image credential provider exec
// plugins (KubeletConfiguration's imageCredentialProviderConfig and
// imageCredentialProviderBinDir; the CredentialProviderConfig of
// k8s.io/kubelet/config/v1 and the credentialprovider.kubelet.k8s.io/v1
// request and response): a plugin whose matchImages match an image is run
// with a CredentialProviderRequest on stdin and its response's
// credentials are cached by image, registry or globally for the duration
// it gives (else the provider's defaultCacheDuration).
package credprovider
