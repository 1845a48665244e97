package grpcserver

import (
	"context"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// refusable is a connection a listener checked against the peers allowed on
// its socket (socket.PeerConn).
type refusable interface{ Refused() error }

// peerInfo is the AuthInfo of a connection: insecure transport, plus the
// socket's verdict on the peer.
type peerInfo struct {
	credentials.AuthInfo
	refused error
}

// peerCreds is the transport of every server: insecure (unix sockets), with
// the verdict of a socket.WithPeers listener carried into each call.
type peerCreds struct {
	credentials.TransportCredentials
}

func (c peerCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		return nil, nil, err
	}
	pi := peerInfo{AuthInfo: info}
	if r, ok := conn.(refusable); ok {
		pi.refused = r.Refused()
	}
	return conn, pi, nil
}

func (c peerCreds) Clone() credentials.TransportCredentials {
	return peerCreds{c.TransportCredentials.Clone()}
}

func newPeerCreds() credentials.TransportCredentials { return peerCreds{insecure.NewCredentials()} }

// peerRefusal is PermissionDenied for a call on a connection whose peer
// the socket does not allow, naming the peer and who is allowed.
func peerRefusal(ctx context.Context) error {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	if pi, ok := p.AuthInfo.(peerInfo); ok && pi.refused != nil {
		return status.Error(codes.PermissionDenied, pi.refused.Error())
	}
	return nil
}

func unaryPeerCheck(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := peerRefusal(ctx); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func streamPeerCheck(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := peerRefusal(ss.Context()); err != nil {
		return err
	}
	return handler(srv, ss)
}
