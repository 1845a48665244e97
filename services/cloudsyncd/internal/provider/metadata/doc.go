// Package metadata is the provider that asks an EC2-style instance metadata
// service (IMDSv2) over HTTP: it obtains a session token with a PUT carrying
// the token's TTL, renews it before it expires, and sends it with every GET.
//
// A 401 means the token expired or was revoked early: the provider fetches a
// new one and retries that request once. A 404 means the instance has no such
// field (an instance without a public IP has no public-ipv4), so the field is
// left out rather than treated as a failure. Every HTTP request has its own
// timeout, so a hung metadata service cannot stall a refresh.
//
//	p, _ := metadata.New("http://169.254.169.254", metadata.WithTokenTTL(6*time.Hour))
//	addrs, _ := p.NodeAddresses(ctx) // local-ipv4, public-ipv4, local-hostname
package metadata
