package gvisor_test

import (
	"os"
	"testing"

	"github.com/airlockhq/airlock/internal/testenv"
)

// TestMain removes the airlock binary the tests built.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
