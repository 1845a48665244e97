// Command cloudsyncd is microlet's cloudsyncd service; see docs/architecture.md.
package main

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/cloudsyncd/app"
)

func main() { service.Main(app.New()) }
