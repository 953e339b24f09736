package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/testenv"
)

func TestRoute(t *testing.T) {
	ctx := context.Background()
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	d, err := n.Client.Route(ctx, api.RouteRequest{Command: "rm -rf build"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Place != "" || d.Profile != "" || d.Score < 0.5 || len(d.Reasons) == 0 || d.Reasons[0].Code != "delete" {
		t.Errorf("no profile: %+v; want no place, the command still scored", d)
	}
	d, err = n.Client.Route(ctx, api.RouteRequest{Command: "rm -rf build", Profile: "safe"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Place != "sandbox" || d.Profile != "safe" || d.Threshold != 0.5 || d.WorkspaceAccess != "rw" || !d.Network ||
		!strings.Contains(d.Reason, "deletes files") {
		t.Errorf("rm -rf under safe: %+v; want a sandbox, rw, network", d)
	}
	d, err = n.Client.Route(ctx, api.RouteRequest{Kind: "code", Language: "python", Profile: "strict"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Place != "sandbox" || d.WorkspaceAccess != "ro" || d.Network || d.Reasons == nil {
		t.Errorf("code under strict: %+v; want a sandbox, ro, no network, reasons []", d)
	}
	_, err = n.Client.Route(ctx, api.RouteRequest{Command: "ls", Profile: "paranoid"})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusBadRequest || !strings.Contains(ce.Message, "off, safe, strict") {
		t.Errorf("unknown profile: %v; want 400 listing the profiles", err)
	}
}

func TestRouteNodeDefault(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Config: func(c *manager.Config) {
		c.Router = manager.RouterConfig{Profile: "safe", Threshold: 0.7}
	}})
	d, err := n.Client.Route(context.Background(), api.RouteRequest{Argv: []string{"rm", "-rf", "build"}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Place != "fence" || d.Profile != "safe" || d.Threshold != 0.7 {
		t.Errorf("rm -rf under the node's safe at 0.7: %+v; want the fence", d)
	}
}
