package app

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/nodeapi/internal/server"
)

// New returns the nodeapi service, ready for service.Main.
func New() service.Service { return server.New() }
