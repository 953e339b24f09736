package e2b_test

import (
	"context"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/testenv"
)

func init() {
	*e2b.FakeSandbox = func(t *testing.T, config func(*manager.Config)) (*manager.Manager, string, string) {
		t.Helper()
		n := testenv.NewFakeNode(t, testenv.FakeOptions{Config: config})
		resp, err := n.Client.Create(context.Background(), api.CreateSandboxRequest{Name: "fs"})
		if err != nil {
			t.Fatal(err)
		}
		return n.Manager, resp.Sandbox.ID, n.Driver.Path(resp.Sandbox.ID, "/")
	}
}
