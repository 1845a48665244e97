package server

import (
	cloudsyncv1 "github.com/microlet/microlet/proto/microlet/cloudsync/v1"
)

// unimplemented answers every call with codes.Unimplemented until issue 7 lands.
type unimplemented struct {
	cloudsyncv1.UnimplementedCloudSyncServiceServer
}
