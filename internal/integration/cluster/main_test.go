package cluster

import (
	"os"
	"testing"

	"github.com/airlockhq/airlock/internal/testenv"
)

// TestMain sweeps what killed test processes left (their daemons, sandboxes, mounts and
// cgroups), stops the tests before -timeout would, and removes the binary they built.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
