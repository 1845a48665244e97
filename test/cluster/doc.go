// Package cluster brings up a multi-node Kubernetes cluster of microlet
// nodes on one machine, as kind does: each node is a Docker container with
// its own address on a Docker network the project creates, its own cgroup
// namespace, containerd v2 as its runtime (microlet talks CRI to it
// directly) and its own /var. The control-plane node also runs etcd,
// kube-apiserver, kube-scheduler and kube-controller-manager; every node
// joins with a bootstrap token. The add-ons (podnet, kube-proxy, CoreDNS,
// metrics-server; package addons) run as pods.
//
//	cl, err := cluster.Up(ctx, cluster.Config{Workers: 2})
//	// export KUBECONFIG=cl.Kubeconfig; kubectl get nodes
//	err = cluster.Load(ctx, cl.Config, "registry.k8s.io/e2e-test-images/agnhost:2.59")
//	err = cluster.Down(ctx, cl.Config)
//
// The node image is built offline (hack/build-debian-rootfs.sh, the pinned
// containerd, runc and CNI plugin builds, `make build`) and cached by its
// content (package dockerimage). cmd/cluster is the command behind
// `make cluster`, `make cluster-down` and `make cluster-load`, and also
// the control plane's process in the control-plane node. docs/cluster.md
// describes the topology, addresses and failure modes.
package cluster
