package main

import (
	"net"

	"google.golang.org/grpc"

	"github.com/microlet/microlet/services/nodestatusd/internal/simulate/simcri"
)

// serveReadyCRI serves an always-ready runtime on path, so the simulated
// nodes are Ready and the startup loop ends as it would on a healthy node.
func serveReadyCRI(path string) (func(), error) {
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	simcri.Register(srv)
	go func() { _ = srv.Serve(lis) }()
	return srv.Stop, nil
}
