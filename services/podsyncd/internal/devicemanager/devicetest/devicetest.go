// Package devicetest runs a device plugin on a real unix socket for tests:
// the manager's unit tests and the node-level tests register it with a
// real podsyncd and change its devices' health.
package devicetest

import (
	"context"
	"net"
	"path"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// RegistrationSocket is the kubelet's registration socket's file name in
// the device plugins directory.
var RegistrationSocket = path.Base(pluginapi.KubeletSocket)

// Plugin is a device plugin that lists the devices sent on Updates and
// counts its ListAndWatch calls.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	// Updates carries the device lists ListAndWatch sends.
	Updates chan []*pluginapi.Device
	// Lists counts ListAndWatch calls.
	Lists atomic.Int32
	// Path is the plugin's socket.
	Path string

	srv *grpc.Server
}

// GetDevicePluginOptions implements DevicePluginServer: no options.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch implements DevicePluginServer: it sends every list from
// Updates until the stream ends.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	p.Lists.Add(1)
	for {
		select {
		case <-s.Context().Done():
			return nil
		case devs := <-p.Updates:
			if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
				return err
			}
		}
	}
}

// Stop stops serving; the socket file stays until the caller removes it.
func (p *Plugin) Stop() { p.srv.Stop() }

// Start serves a plugin on dir/name until the test ends.
func Start(t testing.TB, dir, name string) *Plugin {
	t.Helper()
	p := &Plugin{Updates: make(chan []*pluginapi.Device, 4), Path: filepath.Join(dir, name)}
	lis, err := net.Listen("unix", p.Path)
	if err != nil {
		t.Fatal(err)
	}
	p.srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	go func() { _ = p.srv.Serve(lis) }()
	t.Cleanup(p.srv.Stop)
	return p
}

// Register sends req to the registration socket in dir.
func Register(dir string, req *pluginapi.RegisterRequest) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, RegistrationSocket), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, req)
	return err
}

// Devices returns one device per health value, with IDs "a", "b", ...
func Devices(health ...string) []*pluginapi.Device {
	var out []*pluginapi.Device
	for i, h := range health {
		out = append(out, &pluginapi.Device{ID: string(rune('a' + i)), Health: h})
	}
	return out
}
