package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
)

// WriteFuzzSeed writes one seed of fuzz target into the package's
// testdata/fuzz/<target>/<name> in Go's corpus format, so a plain `go test`
// replays it. values are the fuzz function's arguments in order; uint8 and
// []byte are the types microlet's fuzz targets take; a proto.Message is
// written as its encoding, a []byte argument.
func WriteFuzzSeed(tb testing.TB, target, name string, values ...any) {
	tb.Helper()
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	for _, v := range values {
		switch v := v.(type) {
		case uint8:
			fmt.Fprintf(&b, "uint8(%d)\n", v)
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		case proto.Message:
			m, err := proto.Marshal(v)
			if err != nil {
				tb.Fatal(err)
			}
			fmt.Fprintf(&b, "[]byte(%q)\n", m)
		default:
			tb.Fatalf("WriteFuzzSeed: %T is not a fuzz argument type it knows", v)
		}
	}
	d := filepath.Join("testdata", "fuzz", target)
	if err := os.MkdirAll(d, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, name), []byte(b.String()), 0o644); err != nil { //nolint:gosec // test data in the tree
		tb.Fatal(err)
	}
}
