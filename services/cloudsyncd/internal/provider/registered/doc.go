// Package registered adapts any k8s.io/cloud-provider cloudprovider.Interface
// registered with cloudprovider.RegisterCloudProvider, the ecosystem's plug-in
// convention, to cloudsyncd's provider interface. InstancesV2 is used when the
// provider has it; otherwise Instances answers addresses, ID, type and shutdown
// and Zones answers zone and region, as the cloud-controller-manager does.
//
// A provider is linked in by a blank import in a small main of your own:
//
//	import _ "example.com/mycloud" // calls cloudprovider.RegisterCloudProvider("mycloud", ...)
//	func main() { service.Main(server.New()) }
//
// and chosen with cloud_provider: mycloud (and cloud_config for its config file).
package registered
