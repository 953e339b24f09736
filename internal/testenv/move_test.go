package testenv

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/objstore/s3test"
)

// TestResumeMovesFromDrainedNode: through node-a's API, on nodes that forward and share
// a bucket, a sandbox placed on node-b and suspended there is used through node-b while
// it is ready; once node-b is drained, a resume sent to node-a is answered by node-a,
// which takes the sandbox over from the bucket (the answer's moved part names node-b), and
// a file written on node-b reads back on node-a.
func TestResumeMovesFromDrainedNode(t *testing.T) {
	s3 := s3test.Start(t)
	t.Setenv("AIRLOCK_TEST_S3_ACCESS", s3.AccessKey)
	t.Setenv("AIRLOCK_TEST_S3_SECRET", s3.SecretKey)
	c := newCluster(t, toB, func(o *FakeOptions) {
		o.Objects = config.Objects{Endpoint: s3.Endpoint, Bucket: "airlock", Region: "us-east-1",
			AccessKeyEnv: "AIRLOCK_TEST_S3_ACCESS", SecretKeyEnv: "AIRLOCK_TEST_S3_SECRET"}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	resp, err := c.alice.Create(ctx, api.CreateSandboxRequest{Name: "far"})
	if err != nil || resp.Sandbox.Node != "node-b" {
		t.Fatalf("create placed on node-b: %+v, %v", resp, err)
	}
	if _, err := c.alice.Exec(ctx, "far", api.ExecRequest{Argv: []string{"sh", "-c", "echo from-b > f"}}); err != nil {
		t.Fatal(err)
	}
	if resp, err = c.alice.Suspend(ctx, "far"); err != nil || resp.Sandbox.FilesAt == nil {
		t.Fatalf("suspend through node-a: %+v, %v; want node-b to record its files in the bucket", resp, err)
	}
	if resp, err = c.alice.Resume(ctx, "far"); err != nil || resp.Moved != nil || resp.Sandbox.Node != "node-b" {
		t.Fatalf("resume while node-b is ready: %+v, %v; want it resumed on node-b", resp, err)
	}
	if _, err = c.alice.Suspend(ctx, "far"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.a.Manager.SetNodeDraining(ctx, "node-b", true); err != nil {
		t.Fatal(err)
	}
	resp, err = c.alice.Resume(ctx, "far")
	if err != nil {
		t.Fatalf("resume through node-a once node-b is drained: %v", err)
	}
	if mv := resp.Moved; mv == nil || mv.From != "node-b" || mv.Notice != "" || resp.Sandbox.Node != "node-a" || resp.Sandbox.State != api.StateRunning {
		t.Fatalf("the resume's answer: %+v, moved %+v; want it running on node-a, moved from node-b with nothing lost", resp.Sandbox, resp.Moved)
	}
	res, err := c.alice.Exec(ctx, "far", api.ExecRequest{Argv: []string{"cat", "f"}})
	if err != nil || res.Stdout != "from-b\n" {
		t.Fatalf("the file on node-a: %+v, %v; want what node-b's sandbox wrote", res, err)
	}
	if c.b.Driver.Running(resp.Sandbox.ID) || !c.a.Driver.Running(resp.Sandbox.ID) {
		t.Fatal("the moved sandbox runs on node-b, or not on node-a")
	}
	// node-b, drained but up, drops its copy at its next sweep.
	c.b.Manager.WatchNodes(ctx)
	if ids, _ := c.b.Driver.List(ctx); len(ids) != 0 {
		t.Fatalf("node-b keeps %v after the move", ids)
	}
	var e *errdefs.Error
	if _, _, err := c.b.Manager.Resume(ctx, manager.Call{Owner: "alice"}, "far"); !errors.As(err, &e) || !strings.Contains(err.Error(), "node-a") {
		t.Fatalf("a resume on node-b's manager after the move: %v; want the refusal naming node-a", err)
	}
}
