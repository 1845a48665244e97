// Command statusd is microlet's statusd service; see docs/architecture.md.
package main

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/statusd/app"
)

func main() { service.Main(app.New()) }
