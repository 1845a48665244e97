package server_test

import (
	"os"
	"testing"

	"github.com/microlet/microlet/services/runtime-shim/internal/shimtest"
)

func TestMain(m *testing.M) { os.Exit(shimtest.Main(m)) }
