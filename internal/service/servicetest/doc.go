// Package servicetest runs a service in the test's own process on a real
// unix socket, the way internal/service's skeleton would run it in its own
// binary, but without flags, signals or a process boundary, so a test can
// reach into the service (its registry, its logs) while talking gRPC to it:
//
//	s := server.New()
//	cfg := s.Config().(*server.Config)
//	cfg.ManifestDir = dir // set what the test needs, then
//	r := servicetest.Start(t, s, filepath.Join(dir, "podconfig.sock"))
//	client := podconfigv1.NewPodConfigServiceClient(r.Dial(t))
//
// The service is stopped (context cancelled, server stopped, Run returned)
// when the test ends.
package servicetest
