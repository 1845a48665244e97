// Package promwire carries Prometheus metric families between services:
// Encode writes them in the Prometheus protobuf exposition format
// (length-delimited io.prometheus.client.MetricFamily messages), Decode
// reads them back. podsyncd answers PodSyncService.GetMetrics with it and
// nodeapi serves the decoded families on the kubelet API.
//
//	b, err := promwire.Encode(families)   // families from a prometheus.Gatherer
//	got, err := promwire.Decode(b)        // the same families, in order
package promwire
