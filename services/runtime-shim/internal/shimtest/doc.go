// Package shimtest is the runtime-shim's test harness: it builds the real
// runtime-shim binary once per test process, starts shims on short unix
// sockets under /tmp (Docker-backed or forwarding), a local registry with
// busybox images, and removes every Docker object the run created (all carry
// the run's instance label) when the tests end, also after a failure.
//
//	func TestMain(m *testing.M) { os.Exit(shimtest.Main(m)) }
//
//	env := shimtest.Get(t)                 // skips without Docker
//	sh := env.StartShim(t)                 // Docker backend
//	fw := env.StartShim(t, "--backend=forward", "--forward-endpoint="+sh.Endpoint)
package shimtest
