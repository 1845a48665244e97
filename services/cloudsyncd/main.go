// Command cloudsyncd is microlet's cloudsyncd service; see docs/architecture.md.
package main

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/cloudsyncd/internal/server"
)

func main() { service.Main(server.New()) }
