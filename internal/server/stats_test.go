package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/testenv"
)

// ?follow=1 streams one SandboxStats a line at the sampling interval, and the stream
// ends once the sandbox is terminated; a bad parameter is refused before anything.
func TestStatsFollowAndBadInput(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"alice"},
		Config: func(c *manager.Config) { c.Usage.Interval = 100 * time.Millisecond }})
	alice, _ := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, "alice")})
	if _, err := alice.Create(bg, api.CreateSandboxRequest{Name: "f"}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"?history=maybe", "?follow=2", "?nosuch=1"} {
		req, _ := http.NewRequest("GET", "http://"+n.Addr+"/v1/sandboxes/f/stats"+q, nil)
		req.Header.Set("Authorization", "Bearer "+n.Token(t, "alice"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("stats%s: %d; want 400", q, resp.StatusCode)
		}
	}
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	var got []api.SandboxStats
	err := alice.FollowStats(ctx, "f", false, func(st api.SandboxStats) error {
		got = append(got, st)
		if len(got) == 3 {
			if _, err := alice.Terminate(bg, "f"); err != nil {
				t.Error(err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	if len(got) < 4 || got[0].State != "running" || got[len(got)-1].State != "terminated" {
		t.Fatalf("followed %d lines %+v; want running ones, then the stream ending at terminated", len(got), got)
	}
	if got[1].Memory.UsedBytes != 1<<20 || !got[2].Time.After(got[0].Time) {
		t.Errorf("lines %+v; want the fake's 1 MiB, newer each time", got[:3])
	}
}
