// Command hello is the example static pod's program: it prints a greeting
// with the time every 30 seconds and exits on SIGTERM. `make hello-image`
// imports it into Docker as microlet.local/hello:1.0, a FROM-scratch image
// holding only this static binary, so `make run` shows a Running pod with
// logs on a machine without registry access.
package main
