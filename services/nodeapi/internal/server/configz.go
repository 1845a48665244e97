package server

import (
	"encoding/json"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/microlet/microlet/internal/components"
	"k8s.io/utils/ptr"
)

// configz is what /configz serves: the kubelet configuration fields this
// service owns, in the kubelet's own type, so tools that read a node's
// configuration through the API server's node proxy understand it. Fields
// other services own (pod sync, DNS, eviction) are left at their zero value.
func (s *Server) configz() any {
	if s.cfg.ConfigzFile != "" {
		// Read on each request: the file is the supervisor's, written once
		// before this service starts.
		data, err := os.ReadFile(s.cfg.ConfigzFile)
		if err != nil || !json.Valid(data) {
			return map[string]string{"error": fmt.Sprintf("configz_file %s: unreadable or not JSON", s.cfg.ConfigzFile)}
		}
		return json.RawMessage(data)
	}
	c := &s.cfg
	return &kubeletv1beta1.KubeletConfiguration{
		TypeMeta:           metav1.TypeMeta{Kind: "KubeletConfiguration", APIVersion: kubeletv1beta1.SchemeGroupVersion.String()},
		Address:            c.Address,
		Port:               int32(c.Port),
		ReadOnlyPort:       int32(c.ReadOnlyPort),
		TLSCertFile:        c.TLSCertFile,
		TLSPrivateKeyFile:  c.TLSPrivateKeyFile,
		TLSMinVersion:      c.TLSMinVersion,
		TLSCipherSuites:    c.TLSCipherSuites,
		ServerTLSBootstrap: c.RotateServerCertificates,
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: c.ClientCAFile},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(c.WebhookAuthentication), CacheTTL: metav1.Duration{Duration: c.WebhookCacheTTL}},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(c.AnonymousAuth)},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{
			Mode: kubeletv1beta1.KubeletAuthorizationMode(c.AuthorizationMode),
			Webhook: kubeletv1beta1.KubeletWebhookAuthorization{
				CacheAuthorizedTTL:   metav1.Duration{Duration: c.AuthorizedTTL},
				CacheUnauthorizedTTL: metav1.Duration{Duration: c.UnauthorizedTTL},
			},
		},
		EnableDebuggingHandlers:  ptr.To(c.EnableDebuggingHandlers),
		RuntimeRequestTimeout:    metav1.Duration{Duration: c.RuntimeRequestTimeout},
		ContainerRuntimeEndpoint: c.Endpoint(components.RuntimeShim),
		ImageServiceEndpoint:     c.ImageServiceEndpoint(),
	}
}
