package daemon_test

import (
	"os"
	"testing"

	"github.com/airlockhq/airlock/internal/testenv"
)

// TestMain sweeps what killed test processes left, stops the tests before -timeout
// would (see testenv.Main), and removes the airlock binary the tests built.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
