// Command podconfig is microlet's podconfig service; see docs/architecture.md.
package main

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/podconfig/internal/server"
)

func main() { service.Main(server.New()) }
