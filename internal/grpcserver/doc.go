// Package grpcserver is the one gRPC server bootstrap every microlet service
// uses: grpc.health.v1 that stays NOT_SERVING until the service says it is
// ready, the interceptor chain (Prometheus metrics, slog logging, recovery that
// turns a panic into codes.Internal), reflection only in debug mode, and a
// graceful stop with a deadline.
//
//	srv := grpcserver.New(logger, grpcserver.WithRegistry(reg))
//	statusdv1.RegisterStatusServiceServer(srv.GRPC(), impl)
//	go srv.Serve(lis)
//	srv.SetServing(true) // once the service can really answer
//	defer srv.Stop(10 * time.Second)
package grpcserver
