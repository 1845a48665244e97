// Package addons builds and renders the add-ons a microlet test cluster
// runs as pods: kube-proxy (iptables mode), CoreDNS, metrics-server and
// podnet, our per-node pod network agent (test/cluster/podnet).
//
// The cluster harness uses it in two steps:
//
//	names, err := addons.EnsureImages(ctx, repoRoot, os.Stderr) // build + docker import, cached
//	// ... load names into every node (docker save | ctr -n k8s.io images import)
//	yaml, err := addons.Render(addons.Values{APIServerHost: ip, APIServerPort: 6443,
//		PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/16",
//		ClusterDNS: "10.96.0.10", ClusterDomain: "cluster.local"})
//	// ... kubectl apply -f - < yaml
//
// Every image is made offline from binaries built by hack/build-*.sh and
// Debian packages (docker import of a root filesystem, no base image), under
// its upstream name where one exists. docs/cluster-addons.md describes each
// add-on, its version and configuration.
package addons
