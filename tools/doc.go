// Package tools pins developer tools (buf, golangci-lint) in a module of their
// own; hack/tool.sh builds them from here and caches the binaries.
package tools
