package app

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/cloudsyncd/internal/server"
)

// New returns the cloudsyncd service, ready for service.Main.
func New() service.Service { return server.New() }
