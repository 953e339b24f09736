package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestGoldenRest checks the answers of the verbs the other golden tests leave out, in
// table and JSON where they print anything, on one scenario of the fake node. Figures
// of the host (cores, memory, sizes of the host image) and secrets (tokens, port
// tokens) are normalised; shell, a terminal, is tested in TestShell and not here.
func TestGoldenRest(t *testing.T) {
	n := newNode(t)
	var norm normalizer
	vary := regexp.MustCompile(`("duration_ms": ?|"generation": ?|"version": ?)\d+|\b(tok_|al_|pt_)[0-9A-Za-z_-]+|hmac-sha256:[0-9a-f]+|token=[0-9A-Za-z_-]+|X-Airlock-Port-Token: [0-9A-Za-z_-]+|"token": "[0-9a-f]+|\bbnd_[0-9a-f]+|unix uid \d+`)
	step := func(file, stdin string, args ...string) string {
		t.Helper()
		out, errOut, err := n.run(bg, stdin, args...)
		wantExit(t, err, 0)
		if errOut != "" && !strings.HasPrefix(errOut, "warning: ") {
			t.Errorf("%s: stderr = %q, want nothing but a warning", file, errOut)
		}
		got := vary.ReplaceAllStringFunc(norm.apply(out), func(m string) string {
			return regexp.MustCompile(`[0-9A-Za-z-]+$`).ReplaceAllString(m, "…")
		})
		t.Run(file, func(t *testing.T) { golden(t, file, got) })
		return out
	}
	n.must(t, "create", "box")
	src := filepath.Join(t.TempDir(), "hello.txt")
	os.WriteFile(src, []byte("hello\n"), 0o644)
	step("cp-in.txt", "", "cp", src, "box:/root/hello.txt")
	dst := filepath.Join(t.TempDir(), "back.txt")
	step("cp-out.txt", "", "cp", "box:/root/hello.txt", dst)
	if b, _ := os.ReadFile(dst); string(b) != "hello\n" {
		t.Errorf("cp out wrote %q", b)
	}
	var snap struct {
		Snapshot struct{ ID string } `json:"snapshot"`
	}
	json.Unmarshal([]byte(n.must(t, "snapshot", "create", "box", "-o", "json")), &snap)
	step("snapshot-rm.txt", "", "snapshot", "rm", snap.Snapshot.ID)
	step("port-expose.json", "", "port", "expose", "box", "8000", "-o", "json")
	step("port-close.txt", "", "port", "close", "box", "8000")
	var tok struct {
		ID string `json:"id"`
	}
	n.must(t, "user", "create", "ci", "--role", "viewer", "--service")
	json.Unmarshal([]byte(step("token-create.json", "", "token", "create", "--user", "ci", "--name", "build", "-o", "json")), &tok)
	step("token-revoke.txt", "", "token", "revoke", tok.ID)
	step("user-rm.txt", "", "user", "rm", "ci")
	n.must(t, "role", "create", "reader", "--permission", "sandbox.read")
	step("role-rm.txt", "", "role", "rm", "reader")
	if _, errOut, err := n.run(bg, "tok-0123456789\n", "secret", "create", "--name", "api", "--type", "token", "--allowed-hosts", "api.example.com"); err != nil {
		t.Fatalf("secret create: %v %s", err, errOut)
	}
	step("secret-bind.txt", "", "secret", "bind", "api", "--sandbox", "box", "--target", "API_TOKEN", "--delivery", "env")
	step("secret-unbind.txt", "", "secret", "unbind", "api", "--sandbox", "box", "--yes")
	step("secret-revoke.txt", "", "secret", "revoke", "api", "--yes")
	step("audit-ls.json", "", "audit", "ls", "--action", "DELETE /v1/secrets/{name}", "-o", "json")
	step("image-rm-none.txt", "", "image", "prune", "--yes")
	if out := n.must(t, "version"); !strings.HasPrefix(out, "client: ") || !strings.Contains(out, "\nserver: ") {
		t.Errorf("version = %q, want the client's and the server's", out)
	}
}
