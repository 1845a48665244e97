// Command devbox is the small helper the compose dev box runs inside its
// FROM-scratch control-plane image, where there is no shell, curl or openssl:
//
//	devbox init --dir /creds --node NAME --server https://127.0.0.1:PORT
//	    one-shot credentials step: a CA, the apiserver's serving certificate,
//	    the service-account key pair, a token file, and kubeconfigs for the
//	    admin (system:masters) and the node (system:node:NAME in
//	    system:nodes, what the Node authorizer and NodeRestriction expect).
//	    Existing credentials are kept, so `compose up` twice rotates nothing.
//	    It also writes the apiserver's client credential for nodes' kubelet
//	    API (kubelet-client.crt, CN kube-apiserver-kubelet-client), and
//	    kube-scheduler's and kube-controller-manager's kubeconfigs
//	    (system:kube-scheduler, system:kube-controller-manager) and serving
//	    certificates.
//	devbox probe URL [--ca F --cert F --key F]
//	    exit 0 when URL answers 200: the etcd, kube-apiserver, kube-scheduler
//	    and kube-controller-manager healthchecks.
//	devbox bootstrap --kubeconfig /creds/admin.kubeconfig
//	    one-shot step once the apiserver is healthy, what the test control
//	    plane's start does too: the default namespace's ServiceAccount and
//	    kube-root-ca.crt (before the controller manager gets to them), the
//	    binding of the kubelet client's group to system:kubelet-api-admin,
//	    so nodes' kubelet API (nodeapi) lets `kubectl logs/exec` through,
//	    and the one of system:nodes to the selfnodeclient CSR role, so the
//	    controller manager approves nodes' own client-certificate renewals.
//	devbox cat FILE
//	    print a file of the credentials dir (e.g. the admin kubeconfig).
package main
