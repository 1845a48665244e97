package static

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"

	yaml "go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/microlet/microlet/services/cloudsyncd/internal/provider"
)

// File is the YAML file's content. It has one of two forms: the single-node
// form, where the top-level keys describe the node cloudsyncd runs on, and the
// cluster form, where nodes maps each Node's name to its description and no
// top-level node key is set. The controllers need the cluster form, since they
// answer for every node of the cluster.
type File struct {
	// Node is the single-node form.
	Node `yaml:",inline"`
	// Nodes is the cluster form, keyed by Node name.
	Nodes map[string]Node `yaml:"nodes"`
}

// Node describes one node's instance.
type Node struct {
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

// maxSize bounds the file: even a cluster's worth of nodes is far smaller.
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
	if len(f.Nodes) == 0 {
		return f.Node.validate("")
	}
	if !f.Node.isZero() {
		return errors.New("nodes: the top-level node keys (provider_id, addresses, ...) and nodes cannot both be set; move them under nodes.<name>")
	}
	names := make([]string, 0, len(f.Nodes))
	for name := range f.Nodes {
		names = append(names, name)
	}
	sort.Strings(names) // the same file always reports the same first error
	ids := make(map[string]string, len(names))
	for _, name := range names {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return fmt.Errorf("nodes: name %q: %s", name, errs[0])
		}
		n := f.Nodes[name]
		if err := n.validate("nodes." + name + "."); err != nil {
			return err
		}
		if n.ProviderID == "" {
			continue
		}
		if other, dup := ids[n.ProviderID]; dup {
			return fmt.Errorf("nodes.%s.provider_id %q: also the provider_id of nodes.%s", name, n.ProviderID, other)
		}
		ids[n.ProviderID] = name
	}
	return nil
}

func (n *Node) isZero() bool {
	return n.ProviderID == "" && n.InstanceType == "" && n.Zone == "" && n.Region == "" &&
		len(n.Labels) == 0 && !n.Shutdown && len(n.Addresses) == 0
}

// validate checks one node; prefix is the path of its keys in the file.
func (n *Node) validate(prefix string) error {
	if n.ProviderID != "" {
		u, err := url.Parse(n.ProviderID)
		if err != nil || u.Scheme == "" {
			return fmt.Errorf("%sprovider_id %q: want <scheme>://<id>", prefix, n.ProviderID)
		}
	}
	if len(n.Addresses) == 0 {
		return fmt.Errorf("%saddresses: at least one address is needed", prefix)
	}
	if err := provider.ValidateAddresses(prefix+"addresses", n.NodeAddresses()); err != nil {
		return err
	}
	for k, v := range n.Labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("%slabels: key %q: %s", prefix, k, errs[0])
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("%slabels[%s]: value %q: %s", prefix, k, v, errs[0])
		}
	}
	for _, kv := range [...][2]string{{"instance_type", n.InstanceType}, {"zone", n.Zone}, {"region", n.Region}} {
		if errs := validation.IsValidLabelValue(kv[1]); len(errs) > 0 {
			return fmt.Errorf("%s%s %q: %s", prefix, kv[0], kv[1], errs[0])
		}
	}
	return nil
}

// Lookup finds the description of the node called name, or, when no entry
// has that name, of the entry whose provider_id is providerID (a Node
// renamed on the same instance). ok is false when the file has no entry for
// the node. The single-node form names no node, so it answers an error: only
// the cluster form can say that a node does not exist.
func (f *File) Lookup(name, providerID string) (n *Node, ok bool, err error) {
	if len(f.Nodes) == 0 {
		return nil, false, errors.New("nodes: the file is in the single-node form, which names no node; describe every node under nodes.<name>")
	}
	if nd, found := f.Nodes[name]; found {
		return &nd, true, nil
	}
	if providerID != "" {
		for _, nd := range f.Nodes {
			if nd.ProviderID == providerID {
				return &nd, true, nil
			}
		}
	}
	return nil, false, nil
}

// NodeAddresses converts the node's addresses to core/v1.
func (f *Node) NodeAddresses() []corev1.NodeAddress {
	out := make([]corev1.NodeAddress, 0, len(f.Addresses))
	for _, a := range f.Addresses {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeAddressType(a.Type), Address: a.Address})
	}
	return out
}

// Metadata converts the node's description to provider metadata.
func (f *Node) Metadata() *provider.Metadata {
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
