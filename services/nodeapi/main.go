// Command nodeapi is microlet's kubelet API service (HTTPS :10250); see docs/nodeapi.md.
package main

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/nodeapi/app"
)

func main() { service.Main(app.New()) }
