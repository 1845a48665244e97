package addons

import (
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Values are the cluster facts the add-on manifests depend on.
type Values struct {
	// APIServerHost is the control plane container's IP on the cluster
	// network. kube-proxy and podnet reach the API server there directly:
	// they are what makes the kubernetes Service's ClusterIP work.
	APIServerHost string
	// APIServerPort is the API server's secure port.
	APIServerPort int
	// PodCIDR is the cluster's pod network (10.244.0.0/16); every node's
	// spec.podCIDR is inside it.
	PodCIDR string
	// ServiceCIDR is the Service ClusterIP range (10.96.0.0/16).
	ServiceCIDR string
	// ClusterDNS is the kube-dns Service's ClusterIP (10.96.0.10), the
	// nameserver the node agent writes into pods' resolv.conf.
	ClusterDNS string
	// ClusterDomain is the cluster's DNS domain (cluster.local).
	ClusterDomain string
}

// Validate reports every bad field at once.
func (v Values) Validate() field.ErrorList {
	var errs field.ErrorList
	if _, err := netip.ParseAddr(v.APIServerHost); err != nil {
		errs = append(errs, field.Invalid(field.NewPath("APIServerHost"), v.APIServerHost, "must be an IP address"))
	}
	if v.APIServerPort < 1 || v.APIServerPort > 65535 {
		errs = append(errs, field.Invalid(field.NewPath("APIServerPort"), v.APIServerPort, "must be a port number (1-65535)"))
	}
	pod, perr := netip.ParsePrefix(v.PodCIDR)
	if perr != nil || pod != pod.Masked() {
		errs = append(errs, field.Invalid(field.NewPath("PodCIDR"), v.PodCIDR, "must be a CIDR such as 10.244.0.0/16"))
	}
	svc, serr := netip.ParsePrefix(v.ServiceCIDR)
	if serr != nil || svc != svc.Masked() {
		errs = append(errs, field.Invalid(field.NewPath("ServiceCIDR"), v.ServiceCIDR, "must be a CIDR such as 10.96.0.0/16"))
	}
	if perr == nil && serr == nil && pod.Overlaps(svc) {
		errs = append(errs, field.Invalid(field.NewPath("ServiceCIDR"), v.ServiceCIDR, fmt.Sprintf("overlaps PodCIDR %s", v.PodCIDR)))
	}
	dns, err := netip.ParseAddr(v.ClusterDNS)
	switch {
	case err != nil:
		errs = append(errs, field.Invalid(field.NewPath("ClusterDNS"), v.ClusterDNS, "must be an IP address"))
	case serr == nil && !svc.Contains(dns):
		errs = append(errs, field.Invalid(field.NewPath("ClusterDNS"), v.ClusterDNS, fmt.Sprintf("must be inside ServiceCIDR %s", v.ServiceCIDR)))
	}
	for _, msg := range validation.IsDNS1123Subdomain(v.ClusterDomain) {
		errs = append(errs, field.Invalid(field.NewPath("ClusterDomain"), v.ClusterDomain, msg))
	}
	return errs
}
