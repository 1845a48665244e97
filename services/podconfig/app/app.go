package app

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/podconfig/internal/server"
)

// New returns the podconfig service, ready for service.Main.
func New() service.Service { return server.New() }
