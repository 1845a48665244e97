// Package provider is the seam between cloudsyncd and a cloud: the Provider
// interface every kind of provider implements (static file, EC2-style metadata
// service, external gRPC plug-in, registered k8s.io/cloud-provider), and the
// helpers they share to check what a provider says before cloudsyncd repeats it.
//
// A Provider answers for one node only, the one cloudsyncd runs on, so none of
// its methods takes a node name: the name is given when the provider is built.
//
//	p, _ := static.New("/etc/microlet/cloud.yaml", log)
//	addrs, err := p.NodeAddresses(ctx)
package provider
