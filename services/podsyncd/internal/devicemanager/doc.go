// Package devicemanager is podsyncd's device plugin manager, the part of
// the kubelet's pkg/kubelet/cm/devicemanager that advertises devices: it
// serves the device plugin Registration service (k8s.io/kubelet's
// deviceplugin/v1beta1) on kubelet.sock in the device plugins directory
// (default /var/lib/kubelet/device-plugins, created at Start), and for every
// plugin that registers it dials the plugin's socket in that directory,
// reads its options and follows its ListAndWatch stream, keeping the
// healthy and unhealthy device IDs per extended resource.
//
// Resources reports, per resource, the capacity (all devices) and the
// allocatable (healthy devices). As in the kubelet, when a plugin's stream
// ends (the plugin stopped or its socket went away) the manager does not
// dial it again: every device of that resource becomes unhealthy, so the
// allocatable drops to 0 while the capacity stays, until the plugin
// registers again.
//
// Not here yet: Allocate at container creation, the checkpoint of
// assignments and the admission of pods requesting devices.
package devicemanager
