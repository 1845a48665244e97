package syncloop

import (
	"os"
	"testing"

	"github.com/microlet/microlet/internal/testenv/controlplane"
)

// TestMain stops the control plane TestOversizeStatusOnTheRealStack starts.
func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }
