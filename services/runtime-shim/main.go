// Command runtime-shim is microlet's runtime-shim service; see docs/architecture.md.
package main

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/runtime-shim/app"
)

func main() { service.Main(app.New()) }
