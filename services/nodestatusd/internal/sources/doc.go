// Package sources reads what other daemons know about the node: the CRI
// runtime (Version, Status, ListImages) and cloudsyncd (addresses and
// instance metadata). Both are optional. Connections are lazy gRPC clients
// that redial with backoff, and every answer is cached for a short age so
// that many status syncs (or thousands of simulated nodes) cost one call.
//
//	rt := sources.NewRuntime(runtimeEndpoint, imageEndpoint, 5*time.Second)
//	st := rt.Get(ctx) // st.Err names the socket when the runtime is down
package sources
