// Package pressure judges MemoryPressure, DiskPressure and PIDPressure from
// host measurements against eviction thresholds written the kubelet's way
// ("memory.available": "100Mi", "nodefs.available": "10%"), with the kubelet's
// hard-eviction defaults and its pressure transition period: once a signal
// crosses its threshold the condition stays true until the signal has been
// clear for the whole period, so a node hovering at a threshold does not flap.
//
//	th, err := pressure.ParseThresholds(pressure.DefaultEvictionHard)
//	m := pressure.NewMonitor(th, 5*time.Minute, clock.RealClock{})
//	c := m.Observe(stats) // c.Memory, c.Disk, c.PID
package pressure
