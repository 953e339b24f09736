package gvisor_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/agent"
	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/runtime/gvisor"
	"github.com/airlockhq/airlock/internal/testenv"
)

// A checkpoint saves a running sandbox's processes and memory and stops it; a restore
// brings them back as they were: a process started before runs on with its pid, its
// count and the sandbox's tmpfs, and the agent answers on its new channel.
func TestCheckpointRestore(t *testing.T) {
	e := gvisor.Engine(testenv.Runsc(t))
	h, d, dir := testenv.DriverHarness(t, &e)
	ctx := context.Background()
	id := "sbckpt"
	t.Cleanup(func() { h.Driver.Delete(ctx, id) })
	if err := h.Driver.Start(ctx, h.Spec(id)); err != nil {
		t.Fatal(err)
	}
	sh := func(cmd string) string {
		t.Helper()
		var out bytes.Buffer
		cl := agent.Client{Dial: func(ctx context.Context) (net.Conn, error) { return h.Driver.DialAgent(ctx, id) }}
		res, err := cl.Exec(ctx, agentproto.ExecSpec{Shell: cmd}, nil, &out, &out)
		if err != nil || res.State != agentproto.StateSucceeded {
			t.Fatalf("exec %q: %v %+v: %s", cmd, err, res, out.String())
		}
		return strings.TrimSpace(out.String())
	}
	// A counter in tmpfs, which only the sandbox's memory holds, and its pid.
	pid := sh("(i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.05; done) >/dev/null 2>&1 & echo $!")
	sh("while [ ! -s /tmp/count ]; do sleep 0.05; done")
	img := filepath.Join(dir, "memory")
	if err := d.Checkpoint(ctx, id, img); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if st, _ := d.Status(ctx, id); st != "absent" {
		t.Errorf("after Checkpoint the container is %s; want it stopped and gone (absent)", st)
	}
	if _, err := os.Stat(filepath.Join(img, "checkpoint.img")); err != nil {
		t.Errorf("no memory image: %v", err)
	}
	saved, _ := os.ReadFile(filepath.Join(dir, "sb", id, "fs", "upper", "tmp", "count")) // not there: tmpfs
	if len(saved) > 0 {
		t.Errorf("tmpfs was written to the upper layer: %q", saved)
	}
	if err := d.Restore(ctx, h.Spec(id), img); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	first, _ := strconv.Atoi(sh("cat /tmp/count"))
	if first < 1 {
		t.Fatalf("the counter's file is gone after restore (read %d)", first)
	}
	sh("kill -0 " + pid)
	later, _ := strconv.Atoi(sh("n=$(cat /tmp/count); while [ \"$(cat /tmp/count)\" = $n ]; do sleep 0.05; done; cat /tmp/count"))
	if later <= first {
		t.Errorf("the counter did not run on after restore: %d then %d", first, later)
	}
}

// CheckpointFrozen saves a running sandbox's memory and leaves it in place, frozen: a
// counter written to its upper layer stands still until Thaw, then runs on, and the
// image is complete.
func TestCheckpointFrozen(t *testing.T) {
	e := gvisor.Engine(testenv.Runsc(t))
	h, d, dir := testenv.DriverHarness(t, &e)
	ctx := context.Background()
	id := "sbfrozen"
	t.Cleanup(func() { h.Driver.Delete(ctx, id) })
	if err := h.Driver.Start(ctx, h.Spec(id)); err != nil {
		t.Fatal(err)
	}
	cl := agent.Client{Dial: func(ctx context.Context) (net.Conn, error) { return h.Driver.DialAgent(ctx, id) }}
	var out bytes.Buffer
	res, err := cl.Exec(ctx, agentproto.ExecSpec{Shell: "(i=0; while :; do i=$((i+1)); echo $i > /root/count.new; mv /root/count.new /root/count; sleep 0.02; done) >/dev/null 2>&1 & while [ ! -s /root/count ]; do sleep 0.02; done"}, nil, &out, &out)
	if err != nil || res.State != agentproto.StateSucceeded {
		t.Fatalf("start the counter: %v %+v: %s", err, res, out.String())
	}
	count := func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "sb", id, "fs", "upper", "root", "count"))
		return strings.TrimSpace(string(b))
	}
	img := filepath.Join(dir, "memory")
	if err := d.CheckpointFrozen(ctx, id, img); err != nil {
		t.Fatalf("CheckpointFrozen: %v", err)
	}
	if _, err := os.Stat(filepath.Join(img, "checkpoint.img")); err != nil {
		t.Errorf("no memory image: %v", err)
	}
	before := count()
	time.Sleep(300 * time.Millisecond) // fifteen of the counter's steps, were it running
	if after := count(); before == "" || after != before {
		t.Errorf("after CheckpointFrozen the counter moved: %q then %q; want it frozen", before, after)
	}
	if err := d.Thaw(ctx, id); err != nil {
		t.Fatalf("Thaw: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for count() == before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if count() == before {
		t.Errorf("after Thaw the counter stayed at %q; want it running on", before)
	}
}
