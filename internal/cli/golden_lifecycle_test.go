package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// TestGoldenLifecycle checks the answers of the verbs that change sandboxes and of the
// identity and image listings, in table and JSON, on one scenario of the fake node.
func TestGoldenLifecycle(t *testing.T) {
	n := newNode(t)
	var norm normalizer
	vary := regexp.MustCompile(`("pid": ?|\bpid |"duration_ms": ?|"generation": ?|"version": ?)\d+`)
	secrets := regexp.MustCompile(`\b(tok_|al_)[0-9a-z]+`) // a token's id and the prefix of its secret
	step := func(file string, args ...string) string {
		t.Helper()
		out, errOut, err := n.run(bg, "", args...)
		if err != nil {
			t.Logf("airlock %s: stderr %q", strings.Join(args, " "), errOut)
		}
		wantExit(t, err, 0)
		if errOut != "" {
			t.Errorf("%s: stderr = %q, want nothing", file, errOut)
		}
		got := secrets.ReplaceAllString(vary.ReplaceAllString(norm.apply(out), "${1}0"), "${1}…")
		t.Run(file, func(t *testing.T) { golden(t, file, got) })
		return out
	}
	step("create.txt", "create", "one", "--label", "team=x")
	step("create.json", "create", "two", "-o", "json")
	step("suspend.txt", "suspend", "one")
	step("resume.json", "resume", "one", "-o", "json")
	var snap struct {
		Snapshot struct{ ID string } `json:"snapshot"`
	}
	if err := json.Unmarshal([]byte(step("snapshot-create.json", "snapshot", "create", "one", "-o", "json")), &snap); err != nil {
		t.Fatal(err)
	}
	step("snapshot-get.txt", "snapshot", "get", snap.Snapshot.ID)
	step("fork.txt", "fork", "one", "three")
	n.must(t, "suspend", "one")
	step("restore.txt", "restore", "one", snap.Snapshot.ID)
	step("resume.txt", "resume", "one")
	step("ls-q.txt", "ls", "-q")
	step("network-set.txt", "network", "set", "two", "--network", "allowlist", "--allow", "pypi.org")
	step("run.txt", "run", "--", "echo", "hi")
	step("image-ls.txt", "image", "ls")
	step("user-ls.txt", "user", "ls")
	step("token-ls.json", "token", "ls", "-o", "json")
	step("run-detach.txt", "run", "--detach", "--name", "bg", "--", "echo", "from the background")
	step("logs.txt", "logs", "bg", "--follow")
}
