// Package cninet gives tests the CNI reference plugins that
// hack/build-cni-plugins.sh builds (the version test/cniplugins pins, from
// the microlet cache) and a private pod network on them: its own bridge,
// an unused 10.244.x.0/24, its own configuration and host-local
// directories, the bridge deleted when the test ends.
//
//	n := cninet.New(t) // skips without the plugins or root
//	n.Install(t, "10-test.conflist", n.Conflist())
//	sh := env.StartShim(t, n.ShimArgs()...)
package cninet
