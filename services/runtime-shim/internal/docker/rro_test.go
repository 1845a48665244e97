package docker

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestDaemonFeatures(t *testing.T) {
	for _, tc := range []struct {
		api, kernel      string
		bindOptions, rro bool
	}{
		{"1.41", "6.18.44-fc-v782", false, false}, // Docker 20.10
		{"1.43", "6.1.0-13-amd64", false, false},  // Docker 24
		{"1.44", "6.1.0-13-amd64", true, true},    // Docker 25
		{"1.47", "5.12.0", true, true},
		{"1.47", "5.11.22", true, false}, // no mount_setattr
		{"1.47", "4.19.0-26-amd64", true, false},
		{"1.47", "garbage", true, false},
	} {
		f := &daemonFeatures{apiVersion: tc.api, kernel: tc.kernel}
		if got := f.bindOptions(); got != tc.bindOptions {
			t.Errorf("API %s: bindOptions = %v, want %v", tc.api, got, tc.bindOptions)
		}
		if got := f.recursiveReadOnly(); got != tc.rro {
			t.Errorf("API %s, kernel %s: recursiveReadOnly = %v, want %v", tc.api, tc.kernel, got, tc.rro)
		}
	}
}

func TestValidateRRO(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    *runtimeapi.Mount
		ok   bool
	}{
		{"not recursive", &runtimeapi.Mount{}, true},
		{"read-only, private", &runtimeapi.Mount{Readonly: true, RecursiveReadOnly: true}, true},
		{"not read-only", &runtimeapi.Mount{RecursiveReadOnly: true}, false},
		{"host to container", &runtimeapi.Mount{Readonly: true, RecursiveReadOnly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER}, false},
		{"bidirectional", &runtimeapi.Mount{Readonly: true, RecursiveReadOnly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := validateRRO("config.mounts[0]", tc.m); (err == nil) != tc.ok {
				t.Errorf("validateRRO = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestBindMount(t *testing.T) {
	for _, recursive := range []bool{false, true} {
		m := bindMount(&runtimeapi.Mount{HostPath: "/h", ContainerPath: "/c", Readonly: true, RecursiveReadOnly: recursive}, "rprivate")
		o := m.BindOptions
		if !m.ReadOnly || m.Source != "/h" || m.Target != "/c" || o == nil || !o.CreateMountpoint || o.Propagation != "rprivate" ||
			o.ReadOnlyForceRecursive != recursive || o.ReadOnlyNonRecursive == recursive {
			t.Errorf("recursive=%v: mount = %+v, options %+v", recursive, m, o)
		}
	}
}
