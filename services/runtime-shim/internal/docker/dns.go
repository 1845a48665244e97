package docker

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/moby/moby/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// resolvConfTarget is where containers read their resolver configuration.
const resolvConfTarget = "/etc/resolv.conf"

// validateDNSConfig rejects what cannot become a resolv.conf line: a server
// that is not an IP address, a search domain with white space, an option
// with a line break.
func validateDNSConfig(d *runtimeapi.DNSConfig) error {
	const field = "config.dns_config"
	for i, s := range d.GetServers() {
		if _, err := netip.ParseAddr(s); err != nil {
			return invalid(fmt.Sprintf("%s.servers[%d]", field, i), "not an IP address")
		}
	}
	for i, s := range d.GetSearches() {
		if s == "" || strings.ContainsAny(s, " \t\r\n") {
			return invalid(fmt.Sprintf("%s.searches[%d]", field, i), "must be a non-empty domain without white space")
		}
	}
	for i, o := range d.GetOptions() {
		if o == "" || strings.ContainsAny(o, "\r\n") {
			return invalid(fmt.Sprintf("%s.options[%d]", field, i), "must be non-empty and on one line")
		}
	}
	return nil
}

// dnsConfigEmpty reports whether d asks for nothing, so the runtime's
// default resolver configuration stays.
func dnsConfigEmpty(d *runtimeapi.DNSConfig) bool {
	return len(d.GetServers()) == 0 && len(d.GetSearches()) == 0 && len(d.GetOptions()) == 0
}

// resolvConf renders d as resolv.conf lines.
func resolvConf(d *runtimeapi.DNSConfig) []byte {
	var b strings.Builder
	for _, s := range d.GetServers() {
		b.WriteString("nameserver " + s + "\n")
	}
	if len(d.GetSearches()) > 0 {
		b.WriteString("search " + strings.Join(d.GetSearches(), " ") + "\n")
	}
	if len(d.GetOptions()) > 0 {
		b.WriteString("options " + strings.Join(d.GetOptions(), " ") + "\n")
	}
	return []byte(b.String())
}

// sandboxResolvConf returns the sandbox's resolv.conf as Docker reports it,
// after checking it is the file Docker keeps in the container's own
// directory under its root dir, so that writing it can never touch the
// host's /etc/resolv.conf or any other file.
func (b *Backend) sandboxResolvConf(ctx context.Context, id string) (string, error) {
	ins, err := b.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return "", toStatus(err, "inspect sandbox %s", id)
	}
	info, err := b.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return "", toStatus(err, "docker info")
	}
	p := ins.Container.ResolvConfPath
	want := filepath.Join(info.Info.DockerRootDir, "containers", ins.Container.ID, "resolv.conf")
	if info.Info.DockerRootDir == "" || !filepath.IsAbs(p) || filepath.Clean(p) != want {
		return "", status.Errorf(codes.FailedPrecondition, "sandbox %s: Docker's resolv.conf path %q is not %s; not writing the pod's DNS config there", id, p, want)
	}
	return want, nil
}

// writeSandboxDNS replaces the sandbox's resolv.conf with exactly the pod's
// DNS config, as the CRI means it. Docker cannot give that: it refuses DNS
// settings with the host network (and copies the host's file), and on a
// bridge it takes what the config leaves empty (servers, searches) from the
// host's file. The file is rewritten in place, not renamed over, because the
// pause container already has it bind-mounted; the pod's containers share it
// through container:<pause>, host-network ones by a bind (CreateContainer).
func (b *Backend) writeSandboxDNS(ctx context.Context, id string, d *runtimeapi.DNSConfig) error {
	p, err := b.sandboxResolvConf(ctx, id)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return status.Errorf(codes.FailedPrecondition, "sandbox %s: open Docker's resolv.conf (is the shim on Docker's host?): %v", id, err)
	}
	_, err = f.Write(resolvConf(d))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return status.Errorf(codes.Internal, "sandbox %s: write %s: %v", id, p, err)
	}
	return nil
}

// isSharedResolvConf reports whether a bind mount of a container is the
// sandbox's resolv.conf the shim added for a host-network pod, which
// ContainerStatus does not report as one of the CRI's mounts.
func isSharedResolvConf(destination, source, sandboxID string) bool {
	return destination == resolvConfTarget && sandboxID != "" &&
		filepath.Base(source) == "resolv.conf" && filepath.Base(filepath.Dir(source)) == sandboxID
}
