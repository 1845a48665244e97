// Command microlet-services runs any one of microlet's services: the one
// its argv[0] names (the supervisor starts it so, or a symlink named after
// the service), else the one its first argument names:
//
//	microlet-services podsyncd --run-dir /run/microlet
//
// It is the same code as the service's own binary. Processes of one
// executable share its pages, so the seven services under `microlet run`
// occupy one copy of the code they have in common (gRPC, protobuf, client-go,
// the Go runtime) instead of seven; docs/footprint.md has the numbers.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/service"
	cloudsyncd "github.com/microlet/microlet/services/cloudsyncd/app"
	nodeapi "github.com/microlet/microlet/services/nodeapi/app"
	nodestatusd "github.com/microlet/microlet/services/nodestatusd/app"
	podconfig "github.com/microlet/microlet/services/podconfig/app"
	podsyncd "github.com/microlet/microlet/services/podsyncd/app"
	runtimeshim "github.com/microlet/microlet/services/runtime-shim/app"
	statusd "github.com/microlet/microlet/services/statusd/app"
)

// services maps each component name to its service.
var services = map[string]func() service.Service{
	components.PodConfig:   podconfig.New,
	components.Statusd:     statusd.New,
	components.NodeStatusd: nodestatusd.New,
	components.CloudSyncd:  cloudsyncd.New,
	components.RuntimeShim: runtimeshim.New,
	components.NodeAPI:     nodeapi.New,
	components.PodSyncd:    podsyncd.New,
}

func main() {
	if svc, ok := services[filepath.Base(os.Args[0])]; ok {
		run(filepath.Base(os.Args[0]), svc)
	}
	if len(os.Args) > 1 {
		if svc, ok := services[os.Args[1]]; ok {
			os.Args = os.Args[1:]
			run(os.Args[0], svc)
		}
	}
	names := make([]string, 0, len(services))
	for n := range services {
		names = append(names, n)
	}
	slices.Sort(names)
	fmt.Fprintf(os.Stderr, "usage: microlet-services SERVICE [flags]\n  SERVICE is one of %v (or argv[0] names it)\n", names)
	os.Exit(2)
}

// run names the process after the service, so ps, top and pgrep show
// "podsyncd" as they would for its own binary, then runs it; it does not
// return.
func run(name string, svc func() service.Service) {
	_ = os.WriteFile("/proc/self/comm", []byte(name), 0)
	service.Main(svc())
}
