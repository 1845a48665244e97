// Package simcri is a CRI runtime that is always ready and has no images,
// for simulated nodes (nodestatussim's bench and tests) on a machine
// without a runtime: their nodes turn Ready and the startup loop ends as
// it would on a healthy node.
//
//	s := grpc.NewServer()
//	simcri.Register(s)
//	go s.Serve(lis)
package simcri
