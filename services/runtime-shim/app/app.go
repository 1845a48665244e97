package app

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/runtime-shim/internal/server"
)

// New returns the runtime-shim service, ready for service.Main.
func New() service.Service { return server.New() }
