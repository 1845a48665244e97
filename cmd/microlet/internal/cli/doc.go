// Package cli is the `microlet` command line: `run` (the supervisor),
// `status`, `health` and `get pods|node`. Every subcommand takes --run-dir to
// find the sockets. Exit codes: 0 success, 1 a failure at run time (a service
// down, a call refused), 2 a usage or configuration problem.
//
//	func main() { os.Exit(cli.Execute(os.Args[1:], os.Stdout, os.Stderr)) }
package cli
