package servingcert

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestServingTemplate: host names and DNS addresses become DNS names, IPs
// IP addresses, each once; no addresses, no request.
func TestServingTemplate(t *testing.T) {
	if got := servingTemplate("n1", nil); got != nil {
		t.Errorf("no addresses: %+v, want nil", got)
	}
	got := servingTemplate("n1", []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: "n1"},
		{Type: corev1.NodeInternalIP, Address: "10.0.0.1"},
		{Type: corev1.NodeInternalDNS, Address: "n1.internal"},
		{Type: corev1.NodeExternalIP, Address: "10.0.0.1"},
		{Type: corev1.NodeExternalIP, Address: "2001:db8::1"},
		{Type: corev1.NodeExternalDNS, Address: "n1"},
		{Type: corev1.NodeInternalIP, Address: "not-an-ip"},
	})
	if got == nil {
		t.Fatal("nil template")
	}
	if got.Subject.CommonName != "system:node:n1" || fmt.Sprint(got.Subject.Organization) != "[system:nodes]" {
		t.Errorf("subject %s", got.Subject)
	}
	if fmt.Sprint(got.DNSNames) != "[n1 n1.internal]" {
		t.Errorf("DNS names %v", got.DNSNames)
	}
	if fmt.Sprint(got.IPAddresses) != "[10.0.0.1 2001:db8::1]" {
		t.Errorf("IPs %v", got.IPAddresses)
	}
}
