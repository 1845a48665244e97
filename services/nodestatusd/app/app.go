package app

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/nodestatusd/internal/server"
)

// New returns the nodestatusd service, ready for service.Main.
func New() service.Service { return server.New() }
