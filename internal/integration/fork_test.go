package integration

import (
	"strings"
	"syscall"
	"testing"

	"github.com/airlockhq/airlock/api"
)

// TestForkOfLiveSandbox: a fork of a running sandbox has the parent's files as they were
// at the fork, shares no writes with it either way, survives a SIGKILL of the daemon
// right after the fork returned, and outlives its parent, across a suspend and resume.
func TestForkOfLiveSandbox(t *testing.T) {
	d := startDaemon(t)
	d.must("create", "parent")
	sum := func(name string) string {
		return strings.TrimSpace(d.must("exec", name, "--", "sh", "-c", "sha256sum < /root/f; ls -n /root | tr -s ' ' | cut -d' ' -f3,4,9 | tr '\\n' ,"))
	}
	d.must("exec", "parent", "--", "sh", "-c", "head -c 24M /dev/urandom > /root/f && echo p > /root/old")
	want := sum("parent")
	d.must("fork", "parent", "child")

	d.must("exec", "parent", "--", "sh", "-c", "printf x | dd of=/root/f bs=1 seek=5000000 conv=notrunc 2>/dev/null; echo new > /root/fromparent")
	d.must("exec", "child", "--", "sh", "-c", "echo c > /root/fromchild")
	if out, _, _ := d.airlock("exec", "child", "--", "cat", "/root/fromparent"); out != "" {
		t.Errorf("the parent's write after the fork is in the child: %q", out)
	}
	if out, _, _ := d.airlock("exec", "parent", "--", "cat", "/root/fromchild"); out != "" {
		t.Errorf("the child's write is in the parent: %q", out)
	}
	check := func(when string) {
		t.Helper()
		if got := strings.ReplaceAll(sum("child"), "0 0 fromchild,", ""); got != want {
			t.Errorf("%s: the child's files read %q; want the parent's at the fork, %q", when, got, want)
		}
	}
	check("after writes on both sides")

	d.stop(syscall.SIGKILL)
	d.start()
	if sb := d.get("child"); sb.State != api.StateRunning {
		t.Errorf("after a SIGKILL the child is %s; want running", sb.State)
	}
	check("after a SIGKILL of the daemon")

	d.must("rm", "parent")
	check("after the parent is gone")
	d.must("suspend", "child")
	d.must("resume", "child")
	check("after suspend and resume without the parent")
	d.must("rm", "child")
}
