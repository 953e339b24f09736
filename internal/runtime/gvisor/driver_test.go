package gvisor_test

import (
	"testing"

	"github.com/airlockhq/airlock/internal/runtime/drivertest"
	"github.com/airlockhq/airlock/internal/runtime/gvisor"
	"github.com/airlockhq/airlock/internal/testenv"
)

func TestConformance(t *testing.T) {
	e := gvisor.Engine(testenv.Runsc(t))
	h, _, _ := testenv.DriverHarness(t, &e)
	drivertest.Run(t, h)
	drivertest.RunHostile(t, h)
}
