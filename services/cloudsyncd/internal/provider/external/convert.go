package external

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	cloudproviderv1 "github.com/microlet/microlet/proto/microlet/cloudprovider/v1"
)

var addressTypes = map[cloudproviderv1.NodeAddressType]corev1.NodeAddressType{
	cloudproviderv1.NodeAddressType_NODE_ADDRESS_TYPE_HOSTNAME:     corev1.NodeHostName,
	cloudproviderv1.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_IP:  corev1.NodeInternalIP,
	cloudproviderv1.NodeAddressType_NODE_ADDRESS_TYPE_EXTERNAL_IP:  corev1.NodeExternalIP,
	cloudproviderv1.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_DNS: corev1.NodeInternalDNS,
	cloudproviderv1.NodeAddressType_NODE_ADDRESS_TYPE_EXTERNAL_DNS: corev1.NodeExternalDNS,
}

var addressTypesPB = invert(addressTypes)

var protocols = map[cloudproviderv1.Protocol]corev1.Protocol{
	cloudproviderv1.Protocol_PROTOCOL_TCP:  corev1.ProtocolTCP,
	cloudproviderv1.Protocol_PROTOCOL_UDP:  corev1.ProtocolUDP,
	cloudproviderv1.Protocol_PROTOCOL_SCTP: corev1.ProtocolSCTP,
}

var protocolsPB = invert(protocols)

var trafficPolicies = map[corev1.ServiceExternalTrafficPolicy]cloudproviderv1.ExternalTrafficPolicy{
	corev1.ServiceExternalTrafficPolicyCluster: cloudproviderv1.ExternalTrafficPolicy_EXTERNAL_TRAFFIC_POLICY_CLUSTER,
	corev1.ServiceExternalTrafficPolicyLocal:   cloudproviderv1.ExternalTrafficPolicy_EXTERNAL_TRAFFIC_POLICY_LOCAL,
}

var ipModes = map[cloudproviderv1.IPMode]corev1.LoadBalancerIPMode{
	cloudproviderv1.IPMode_IP_MODE_VIP:   corev1.LoadBalancerIPModeVIP,
	cloudproviderv1.IPMode_IP_MODE_PROXY: corev1.LoadBalancerIPModeProxy,
}

func invert[K, V comparable](m map[K]V) map[V]K {
	out := make(map[V]K, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}

// fromAddresses converts a plug-in's addresses; field names them in errors.
func fromAddresses(field string, in []*cloudproviderv1.NodeAddress) ([]corev1.NodeAddress, error) {
	var out []corev1.NodeAddress
	for i, a := range in {
		t, ok := addressTypes[a.GetType()]
		if !ok {
			return nil, fmt.Errorf("%s[%d].type %s is not a known address type", field, i, a.GetType())
		}
		out = append(out, corev1.NodeAddress{Type: t, Address: a.GetAddress()})
	}
	return out, nil
}

// toAddresses converts addresses for a plug-in, leaving out types it cannot name.
func toAddresses(in []corev1.NodeAddress) []*cloudproviderv1.NodeAddress {
	out := make([]*cloudproviderv1.NodeAddress, 0, len(in))
	for _, a := range in {
		if t, ok := addressTypesPB[a.Type]; ok {
			out = append(out, &cloudproviderv1.NodeAddress{Type: t, Address: a.Address})
		}
	}
	return out
}

// toService converts the parts of a Service a balancer needs.
func toService(svc *corev1.Service, lbName string) *cloudproviderv1.Service {
	out := &cloudproviderv1.Service{
		Namespace:                svc.Namespace,
		Name:                     svc.Name,
		Uid:                      string(svc.UID),
		LoadBalancerName:         lbName,
		ExternalTrafficPolicy:    trafficPolicies[svc.Spec.ExternalTrafficPolicy],
		HealthCheckNodePort:      svc.Spec.HealthCheckNodePort,
		LoadBalancerIp:           svc.Spec.LoadBalancerIP, //nolint:staticcheck // deprecated in the API, still honoured by providers
		LoadBalancerSourceRanges: svc.Spec.LoadBalancerSourceRanges,
		Annotations:              svc.Annotations,
		ClusterIps:               svc.Spec.ClusterIPs,
	}
	for _, f := range svc.Spec.IPFamilies {
		out.IpFamilies = append(out.IpFamilies, string(f))
	}
	for _, p := range svc.Spec.Ports {
		out.Ports = append(out.Ports, &cloudproviderv1.ServicePort{
			Name:       p.Name,
			Protocol:   protocolsPB[p.Protocol],
			Port:       p.Port,
			NodePort:   p.NodePort,
			TargetPort: p.TargetPort.String(),
		})
	}
	return out
}

// toNodes converts the nodes a balancer may send to.
func toNodes(nodes []*corev1.Node) []*cloudproviderv1.TargetNode {
	out := make([]*cloudproviderv1.TargetNode, 0, len(nodes))
	for _, n := range nodes {
		if n == nil {
			continue
		}
		out = append(out, &cloudproviderv1.TargetNode{
			Name:       n.Name,
			ProviderId: n.Spec.ProviderID,
			Addresses:  toAddresses(n.Status.Addresses),
			Labels:     n.Labels,
		})
	}
	return out
}

// fromStatus converts a plug-in's balancer status, refusing what the API
// server would refuse later with a less helpful message.
func fromStatus(in *cloudproviderv1.LoadBalancerStatus) (*corev1.LoadBalancerStatus, error) {
	out := &corev1.LoadBalancerStatus{}
	for i, ing := range in.GetIngress() {
		if ing.GetIp() == "" && ing.GetHostname() == "" {
			return nil, fmt.Errorf("status.ingress[%d]: neither ip nor hostname", i)
		}
		o := corev1.LoadBalancerIngress{IP: ing.GetIp(), Hostname: ing.GetHostname()}
		if m, ok := ipModes[ing.GetIpMode()]; ok && o.IP != "" {
			o.IPMode = &m
		}
		for j, p := range ing.GetPorts() {
			proto, ok := protocols[p.GetProtocol()]
			if !ok {
				return nil, fmt.Errorf("status.ingress[%d].ports[%d].protocol %s is not TCP, UDP or SCTP", i, j, p.GetProtocol())
			}
			ps := corev1.PortStatus{Port: p.GetPort(), Protocol: proto}
			if e := p.GetError(); e != "" {
				ps.Error = &e
			}
			o.Ports = append(o.Ports, ps)
		}
		out.Ingress = append(out.Ingress, o)
	}
	return out, nil
}
