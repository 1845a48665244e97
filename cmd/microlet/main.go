// Command microlet is the supervisor and command line of microlet: `microlet
// run` starts the services, `microlet status`, `health` and `get` inspect
// them. See docs/supervisor.md.
package main

import (
	"os"

	"github.com/microlet/microlet/cmd/microlet/internal/cli"
)

func main() { os.Exit(cli.Execute(os.Args[1:], os.Stdout, os.Stderr)) }
