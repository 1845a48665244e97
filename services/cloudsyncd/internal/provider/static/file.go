package static

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"

	yaml "go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/microlet/microlet/services/cloudsyncd/internal/provider"
)

// File is the YAML file's content.
type File struct {
	// ProviderID is the Node's spec.providerID, "<scheme>://<id>".
	ProviderID string `yaml:"provider_id"`
	// InstanceType becomes the instance-type labels.
	InstanceType string `yaml:"instance_type"`
	// Zone and Region become the topology labels.
	Zone   string `yaml:"zone"`
	Region string `yaml:"region"`
	// Labels are additional labels for the Node.
	Labels map[string]string `yaml:"labels"`
	// Shutdown reports the instance as shut down.
	Shutdown bool `yaml:"shutdown"`
	// Addresses of the node, in order of preference.
	Addresses []Address `yaml:"addresses"`
}

// Address is one node address.
type Address struct {
	// Type is a core/v1 NodeAddressType such as InternalIP.
	Type string `yaml:"type"`
	// Address is the IP or DNS name.
	Address string `yaml:"address"`
}

// maxSize bounds the file: it describes one node, so anything large is a mistake.
const maxSize = 1 << 20

// Parse decodes and checks a static provider file. Unknown keys are refused so a
// misspelt key is an error rather than a silently missing value.
func Parse(data []byte) (*File, error) {
	if len(data) > maxSize {
		return nil, fmt.Errorf("file is %d bytes, more than %d", len(data), maxSize)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f File
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("file is empty")
		}
		var te *yaml.TypeError
		if errors.As(err, &te) && len(te.Errors) > 0 {
			return nil, errors.New(te.Errors[0])
		}
		return nil, err
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	return &f, nil
}

func (f *File) validate() error {
	if f.ProviderID != "" {
		u, err := url.Parse(f.ProviderID)
		if err != nil || u.Scheme == "" {
			return fmt.Errorf("provider_id %q: want <scheme>://<id>", f.ProviderID)
		}
	}
	if len(f.Addresses) == 0 {
		return errors.New("addresses: at least one address is needed")
	}
	if err := provider.ValidateAddresses("addresses", f.NodeAddresses()); err != nil {
		return err
	}
	for k, v := range f.Labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("labels: key %q: %s", k, errs[0])
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("labels[%s]: value %q: %s", k, v, errs[0])
		}
	}
	for name, v := range map[string]string{"instance_type": f.InstanceType, "zone": f.Zone, "region": f.Region} {
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("%s %q: %s", name, v, errs[0])
		}
	}
	return nil
}

// NodeAddresses converts the file's addresses to core/v1.
func (f *File) NodeAddresses() []corev1.NodeAddress {
	out := make([]corev1.NodeAddress, 0, len(f.Addresses))
	for _, a := range f.Addresses {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeAddressType(a.Type), Address: a.Address})
	}
	return out
}

// Metadata converts the file to provider metadata.
func (f *File) Metadata() *provider.Metadata {
	labels := make(map[string]string, len(f.Labels))
	for k, v := range f.Labels {
		labels[k] = v
	}
	return &provider.Metadata{
		ProviderID:       f.ProviderID,
		InstanceType:     f.InstanceType,
		Zone:             f.Zone,
		Region:           f.Region,
		Addresses:        f.NodeAddresses(),
		AdditionalLabels: labels,
	}
}
