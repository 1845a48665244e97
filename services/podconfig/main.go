// Command podconfig is microlet's podconfig service; see docs/architecture.md.
package main

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/podconfig/app"
)

func main() { service.Main(app.New()) }
