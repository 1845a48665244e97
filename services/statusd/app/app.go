package app

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/statusd/internal/server"
)

// New returns the statusd service, ready for service.Main.
func New() service.Service { return server.New() }
