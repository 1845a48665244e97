package server

import (
	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
)

// unimplemented answers every call with codes.Unimplemented until issue 4 lands.
type unimplemented struct {
	podconfigv1.UnimplementedPodConfigServiceServer
}
