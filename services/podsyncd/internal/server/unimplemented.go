package server

import (
	podsyncv1 "github.com/microlet/microlet/proto/microlet/podsync/v1"
)

// unimplemented answers every call with codes.Unimplemented until issue 10 lands.
type unimplemented struct {
	podsyncv1.UnimplementedPodSyncServiceServer
}
