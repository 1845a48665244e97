// Package local is the cloud provider that makes Services of type
// LoadBalancer real on one machine, the way people try LoadBalancers on a
// dev box: each such Service gets an address of this host from a pool
// (local_lb_pool, by default the loopback range 127.0.1.0/24, which Linux
// routes to lo with no set-up), and every Service port gets a listener on
// that address forwarding TCP connections and UDP datagrams to the
// Service's ready endpoints, read from EndpointSlices through an informer.
//
// Addresses are stable: a Service keeps its address for as long as it
// exists; after a restart (or on a new leader) it gets back the address its
// status shows when that one is free, and a fresh address is never one
// another Service's status shows, so the order in which a new leader
// ensures them does not matter; spec.loadBalancerIP is honoured when it is
// in the pool.
// Backends are chosen round-robin per listener among the ready endpoints of
// the matching port, at each new TCP connection or UDP client; a UDP client
// (its source address) keeps its backend until it has sent nothing for
// local_udp_idle_timeout. EnsureLoadBalancer opens and closes listeners as
// the ports change; EnsureLoadBalancerDeleted closes them all, with their
// connections, and releases the address. Ingress addresses are reported with
// ipMode Proxy, since the traffic is proxied rather than delivered to the
// node with the balancer address as destination.
//
// Instances: the machine is no cloud, so every Node exists and none is shut
// down; InstanceMetadata gives "local://<node name>" as provider ID (kept when
// the Node has one) and no addresses, so Nodes keep the addresses they report.
//
// Routes (for the route controller): each Node's pod CIDR becomes a kernel
// route of this host, through netlink, via the Node's InternalIP of the
// CIDR's family, in table local_route_table (main) marked with protocol
// local_route_protocol (211). Only routes of that protocol are listed,
// replaced or deleted; a route of anyone else's to the same destination is
// an error, never overwritten. ListRoutes names a route's Node by the Node
// whose spec.podCIDRs has the destination. Creating and deleting are
// idempotent.
//
//	p, err := local.New(local.Settings{Pool: []string{"127.0.1.0/24"}}, clientset, log)
//	defer p.Close()
//	st, err := p.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes) // st.Ingress[0].IP == "127.0.1.1"
package local
