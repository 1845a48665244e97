package server

import (
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
)

// unimplemented answers every call with codes.Unimplemented until issue 5 lands.
type unimplemented struct {
	statusdv1.UnimplementedStatusServiceServer
}
