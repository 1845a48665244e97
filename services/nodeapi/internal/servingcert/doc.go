// Package servingcert provides the kubelet API's TLS serving certificate:
// files given by the operator (tls_cert_file, tls_private_key_file), or, as
// the kubelet does without them, a self-signed certificate for the node's
// host name kept in the certificate directory (kubelet.crt, kubelet.key) and
// reused across restarts. Either way the files are watched and a renewed
// certificate is served to new connections without a restart. ParsePolicy
// reads the kubelet's tlsMinVersion and tlsCipherSuites into the Policy
// TLSConfig applies.
//
//	src, err := servingcert.SelfSigned("/var/lib/microlet/pki", "node-1")
//	go src.Run(ctx)
//	policy, warnings, err := servingcert.ParsePolicy("VersionTLS12", nil)
//	srv.TLSConfig = src.TLSConfig(clientCA, policy)
package servingcert
