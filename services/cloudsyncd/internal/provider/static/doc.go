// Package static is the provider that reads a node's addresses and instance
// metadata from a YAML file, for machines with no metadata service (bare metal,
// labs) or for a ConfigMap mounted into a cloudsyncd pod.
//
// The file is re-read when it changes: the directory is watched with fsnotify,
// so both an in-place edit and a ConfigMap update (the kubelet swaps the
// "..data" symlink) are seen. A file that no longer parses makes calls fail with
// the file and field named, and the sync manager keeps the last good answer.
//
//	provider_id: static://rack1/node-a
//	instance_type: m1.metal
//	zone: rack1
//	region: dc1
//	labels: {example.com/pool: gpu}
//	shutdown: false
//	addresses:
//	- {type: InternalIP, address: 10.0.0.5}
//	- {type: Hostname, address: node-a}
//
// The cluster form describes many nodes, keyed by Node name, for the
// cluster-wide controllers (package cloud): a Node the file does not list has
// no instance. In node mode, WithNodeName picks this node's entry:
//
//	nodes:
//	  node-a: {provider_id: static://rack1/node-a, addresses: [{type: InternalIP, address: 10.0.0.5}]}
//	  node-b: {shutdown: true, addresses: [{type: InternalIP, address: 10.0.0.6}]}
package static
