// Package version holds microlet's version, set at build time with
// -ldflags "-X github.com/microlet/microlet/internal/version.Version=...".
package version
