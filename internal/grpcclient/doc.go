// Package grpcclient dials microlet services and CRI endpoints over unix
// sockets. Connections reconnect on their own with exponential backoff, so a
// restarted peer is picked up without any caller code; WaitServing blocks
// until a peer's grpc.health.v1 says SERVING.
//
//	cc, err := grpcclient.Dial("unix:///run/microlet/podconfig.sock")
//	err = grpcclient.WaitServing(ctx, cc, "")
package grpcclient
