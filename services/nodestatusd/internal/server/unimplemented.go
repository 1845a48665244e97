package server

import (
	nodestatusv1 "github.com/microlet/microlet/proto/microlet/nodestatus/v1"
)

// unimplemented answers every call with codes.Unimplemented until issue 6 lands.
type unimplemented struct {
	nodestatusv1.UnimplementedNodeStatusServiceServer
}
