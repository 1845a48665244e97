// Command gendocs writes docs/kubelet-config.md's field table
// (kubeletconfig.Markdown) to stdout; make generate runs it and
// check-generate fails when the committed file differs.
package main

import (
	"fmt"

	"github.com/microlet/microlet/internal/kubeletconfig"
)

func main() { fmt.Print(kubeletconfig.Markdown()) }
