package cli

import (
	"strings"
	"testing"
)

// TestDetachedLogs: a detached command's output is kept; logs prints it, its tail, and
// follows it to the end, exiting with the command's code.
func TestDetachedLogs(t *testing.T) {
	n := newNode(t)
	out := n.must(t, "run", "--detach", "--name", "bg", "--", "sh", "-c", "echo hello; echo oops >&2; sleep 0.5; echo bye; exit 4")
	if strings.TrimSpace(out) != "bg" {
		t.Fatalf("run --detach printed %q, want the sandbox's name", out)
	}
	stdout, stderr, err := n.run(bg, "", "logs", "bg", "--follow")
	wantExit(t, err, 4)
	if stdout != "hello\nbye\n" || stderr != "oops\n" {
		t.Errorf("logs --follow: stdout %q, stderr %q; want hello, bye and oops", stdout, stderr)
	}
	stdout, _, err = n.run(bg, "", "logs", "bg", "--tail", "1")
	wantExit(t, err, 4)
	if stdout != "bye\n" {
		t.Errorf("logs --tail 1 = %q, want the last line", stdout)
	}
	_, stderr, err = n.run(bg, "", "logs", "nobg-here")
	if err == nil {
		t.Errorf("logs of a sandbox that does not exist succeeded (%q)", stderr)
	}
	// run takes create's lifetime flags, and a zero lifetime is refused, not 8h.
	_, stderr, err = n.run(bg, "", "run", "--detach", "--max-lifetime", "0", "--", "true")
	if err == nil || !strings.Contains(stderr, "--max-lifetime 0s is out of range") {
		t.Errorf("run --max-lifetime 0: %v, %q; want the daemon's refusal with the allowed range", err, stderr)
	}
}
