// Package version holds microlet's version, set at build time with
// -ldflags "-X github.com/microlet/microlet/internal/version.Version=...",
// and the Kubernetes release microlet implements, which Nodes report as
// their kubeletVersion.
package version
