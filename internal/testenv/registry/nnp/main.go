// Command nnp prints the effective user ID it runs with. The test registry
// installs it setuid-root in critest's "nonewprivs" image: with
// no_new_privs set the setuid bit is ignored and the caller's UID shows,
// otherwise 0 does.
package main

import (
	"fmt"
	"os"
)

func main() { fmt.Printf("Effective uid: %d\n", os.Geteuid()) }
