package cni

import (
	"fmt"
	"math"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The pod annotations the kubelet's traffic shaping reads.
const (
	AnnotationIngressBandwidth = "kubernetes.io/ingress-bandwidth"
	AnnotationEgressBandwidth  = "kubernetes.io/egress-bandwidth"
)

// InvalidArgumentError is a bad field of the sandbox configuration.
type InvalidArgumentError struct{ Field, Reason string }

func (e *InvalidArgumentError) Error() string { return e.Field + ": " + e.Reason }

type portMapping struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

type bandwidth struct {
	IngressRate  uint64 `json:"ingressRate,omitempty"`
	IngressBurst uint64 `json:"ingressBurst,omitempty"`
	EgressRate   uint64 `json:"egressRate,omitempty"`
	EgressBurst  uint64 `json:"egressBurst,omitempty"`
}

type dns struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// capabilityArgs turns the sandbox configuration into the runtimeConfig
// capabilities plugins may ask for: portMappings (host ports only, as the
// kubelet's hostport handling had it), bandwidth (from the pod's
// bandwidth annotations, in bits per second, burst unlimited) and dns.
func capabilityArgs(c *runtimeapi.PodSandboxConfig) (map[string]any, error) {
	out := map[string]any{}
	var pms []portMapping
	for _, pm := range c.GetPortMappings() {
		if pm.HostPort <= 0 {
			continue
		}
		pms = append(pms, portMapping{HostPort: pm.HostPort, ContainerPort: pm.ContainerPort, Protocol: strings.ToLower(pm.Protocol.String()), HostIP: pm.HostIp})
	}
	if len(pms) > 0 {
		out["portMappings"] = pms
	}
	var bw bandwidth
	for _, a := range []struct {
		key         string
		rate, burst *uint64
	}{{AnnotationIngressBandwidth, &bw.IngressRate, &bw.IngressBurst}, {AnnotationEgressBandwidth, &bw.EgressRate, &bw.EgressBurst}} {
		v, ok := c.GetAnnotations()[a.key]
		if !ok {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() <= 0 {
			return nil, &InvalidArgumentError{Field: "config.annotations[" + a.key + "]", Reason: fmt.Sprintf("%q is not a positive quantity (bits per second)", v)}
		}
		*a.rate, *a.burst = uint64(q.Value()), math.MaxInt32
	}
	if bw != (bandwidth{}) {
		out["bandwidth"] = bw
	}
	if d := c.GetDnsConfig(); d != nil && (len(d.Servers) > 0 || len(d.Searches) > 0 || len(d.Options) > 0) {
		out["dns"] = dns{Servers: d.Servers, Searches: d.Searches, Options: d.Options}
	}
	return out, nil
}
