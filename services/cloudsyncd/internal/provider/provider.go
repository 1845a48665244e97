package provider

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// Provider is what cloudsyncd asks a cloud about its own node. Calls may be
// slow (a metadata service, a remote API); callers bound them with ctx.
type Provider interface {
	// Name is the provider's name, used in logs and error messages.
	Name() string
	// NodeAddresses returns the node's addresses in the provider's order.
	NodeAddresses(ctx context.Context) ([]corev1.NodeAddress, error)
	// InstanceMetadata returns the instance's identity (InstancesV2 semantics).
	InstanceMetadata(ctx context.Context) (*Metadata, error)
	// InstanceShutdown reports whether the instance is shut down.
	InstanceShutdown(ctx context.Context) (bool, error)
	// Close releases connections and watches.
	Close() error
}

// Metadata is an instance's identity.
type Metadata struct {
	// ProviderID is "<provider>://<id>", the Node's spec.providerID.
	ProviderID string
	// InstanceType as the provider names it.
	InstanceType string
	// Zone and Region of the instance.
	Zone, Region string
	// Addresses of the instance (may be empty when the provider only
	// reports them through NodeAddresses).
	Addresses []corev1.NodeAddress
	// AdditionalLabels the provider wants on the Node.
	AdditionalLabels map[string]string
}

// ErrNotFound marks an answer a provider does not have, such as a metadata
// field the service does not serve. It is not a failure of the provider.
var ErrNotFound = errors.New("not found")

// validTypes are the address types core/v1 defines.
var validTypes = map[corev1.NodeAddressType]bool{
	corev1.NodeHostName:    true,
	corev1.NodeInternalIP:  true,
	corev1.NodeExternalIP:  true,
	corev1.NodeInternalDNS: true,
	corev1.NodeExternalDNS: true,
}

// ValidateAddresses checks that every address has a known type and that IP
// types carry an IP, so a provider's typo never reaches the Node's status.
// field names the place in the provider's input for the error message.
func ValidateAddresses(field string, addrs []corev1.NodeAddress) error {
	for i, a := range addrs {
		if !validTypes[a.Type] {
			return fmt.Errorf("%s[%d].type %q: want Hostname, InternalIP, ExternalIP, InternalDNS or ExternalDNS", field, i, a.Type)
		}
		if a.Address == "" {
			return fmt.Errorf("%s[%d].address: empty", field, i)
		}
		if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
			if _, err := netip.ParseAddr(a.Address); err != nil {
				return fmt.Errorf("%s[%d].address %q: not an IP address", field, i, a.Address)
			}
		}
	}
	return nil
}

// EqualAddresses reports whether a and b hold the same addresses in the same
// order; order matters because consumers pick the first of a type.
func EqualAddresses(a, b []corev1.NodeAddress) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
