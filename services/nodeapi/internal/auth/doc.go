// Package auth puts the kubelet's authentication and authorization in front
// of the kubelet API, built from k8s.io/apiserver's delegating pieces exactly
// as the kubelet builds them: x509 client certificates checked against a
// client CA bundle (reloaded when the file changes), bearer tokens checked
// with TokenReview, anonymous requests only when enabled; every request is
// then authorized with a SubjectAccessReview on the node object — verb from
// the HTTP method, subresource from the path (stats, metrics, log, pods,
// healthz, configz, else proxy), with the fine-grained subresource tried
// before proxy as in Kubernetes 1.36.
//
//	a, err := auth.New(auth.Config{NodeName: "n1", ClientCAFile: "/etc/kubernetes/pki/ca.crt", Webhook: true}, clientset)
//	go a.Run(ctx)
//	handler = a.Filter(handler) // 401 without a credential, 403 without the permission
package auth
