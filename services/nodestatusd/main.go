// Command nodestatusd is microlet's nodestatusd service; see docs/architecture.md.
package main

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/nodestatusd/internal/server"
)

func main() { service.Main(server.New()) }
