package app

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/podsyncd/internal/server"
)

// New returns the podsyncd service, ready for service.Main.
func New() service.Service { return server.New() }
