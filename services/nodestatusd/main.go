// Command nodestatusd is microlet's nodestatusd service; see docs/architecture.md.
package main

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/nodestatusd/app"
)

func main() { service.Main(app.New()) }
