// Package server is the runtime-shim service: its configuration, its gRPC API and
// the work it runs. The real behaviour is built in issue 8; until then
// every call answers codes.Unimplemented and says so.
package server
