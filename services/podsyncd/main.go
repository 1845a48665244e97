// Command podsyncd is microlet's podsyncd service; see docs/architecture.md.
package main

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/podsyncd/app"
)

func main() { service.Main(app.New()) }
