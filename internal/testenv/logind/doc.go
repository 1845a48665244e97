// Package logind gives tests a real private D-Bus (a dbus-daemon started
// for the test) with a narrow stand-in for systemd-logind on it: the one
// fake of the graceful-shutdown proof, because a real logind needs systemd
// as PID 1 and would shut the machine down. The stand-in exports just what
// the kubelet uses of org.freedesktop.login1.Manager — Inhibit (returning a
// real pipe whose closing the test observes), the InhibitDelayMaxUSec
// property and the PrepareForShutdown signal — and systemd1's KillUnit,
// whose SIGHUP to systemd-logind.service re-reads the drop-in file as
// logind's reload would.
//
//	bus := logind.StartBus(t)
//	ld := logind.Start(t, bus, dropInPath, 5*time.Second)
//	// point the code under test at bus.Address ...
//	lock := ld.WaitLock(t, 1, time.Minute)
//	ld.PrepareForShutdown(t, true)
//	<-lock.Released()
package logind
