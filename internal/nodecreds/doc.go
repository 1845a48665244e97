// Package nodecreds gives a node its API server credential the way a
// kubelet joining with `kubeadm join` gets one, and keeps it fresh.
//
// Ensure checks the node's kubeconfig: when it is missing, unreadable, or
// its client certificate has expired or is not valid yet, it uses the
// bootstrap kubeconfig (a bootstrap token, usually) to request a
// kubernetes.io/kube-apiserver-client-kubelet certificate for
// system:node:<name> in group system:nodes, waits for the certificates API
// to approve and sign it, stores key and certificate in the certificate
// directory with client-go's FileStore (kubelet-client-<time>.pem, 0600,
// and the kubelet-client-current.pem symlink swapped atomically) and writes
// a kubeconfig that points at kubelet-client-current.pem (crash-safely,
// internal/statefile). A kubeconfig that does not decode, torn by a crash
// or garbled, is moved aside as <name>.corrupt-<time> with a Warning
// before the new one is written (docs/state-files.md).
//
// Rotate then runs client-go's certificate manager on the same store: it
// renews the certificate at a jittered 70–90 % of its lifetime. The manager
// waits on a monotonic timer, which a wall clock jumping forward (or a
// machine's sleep) does not move; the Rotator checks the wall clock every
// minute and, past 90 % of the lifetime, starts a new manager, which
// rotates at once. Every
// client built from the kubeconfig reads the certificate file again, so
// the services pick the renewed certificate up without a restart (see
// internal/kubeclient). Old pairs are never deleted, so a crash at any
// moment leaves the symlink on a usable pair.
//
// Exactly one process per node runs this package: `microlet run` in
// process, or `microlet credentials` when systemd or compose start the
// services one by one. The services only read the files.
package nodecreds
