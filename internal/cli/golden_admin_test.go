package cli

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/testenv"
)

// TestGoldenAdmin checks the answers of the secret, identity, operation and clean-up
// verbs, in table and JSON, on one scenario of the fake node.
func TestGoldenAdmin(t *testing.T) {
	n := newNode(t)
	var norm normalizer
	vary := regexp.MustCompile(`("pid": ?|"duration_ms": ?|"generation": ?|"version": ?)\d+|\b(tok_|al_)[0-9a-z]+|hmac-sha256:[0-9a-f]+|\d+ records`)
	step := func(file, stdin string, args ...string) string {
		t.Helper()
		out, errOut, err := n.run(bg, stdin, args...)
		wantExit(t, err, 0)
		if errOut != "" {
			t.Errorf("%s: stderr = %q, want nothing", file, errOut)
		}
		got := vary.ReplaceAllStringFunc(norm.apply(out), func(m string) string {
			if strings.HasSuffix(m, " records") { // how many depends on timing
				return "N records"
			}
			return regexp.MustCompile(`[0-9a-z]+$`).ReplaceAllString(m, "…")
		})
		t.Run(file, func(t *testing.T) { golden(t, file, got) })
		return out
	}
	step("secret-create.txt", "sk-live-0123456789abcdef\n", "secret", "create", "--name", "stripe", "--type", "token",
		"--allowed-hosts", "api.stripe.com", "--description", "payments")
	step("secret-get.json", "", "secret", "get", "stripe", "-o", "json")
	step("secret-rotate.txt", "sk-live-fedcba9876543210\n", "secret", "rotate", "stripe")
	step("user-create.txt", "", "user", "create", "ci", "--role", "developer", "--service")
	step("user-roles.json", "", "user", "roles", "ci", "--role", "viewer", "-o", "json")
	step("role-create.txt", "", "role", "create", "reader", "--permission", "sandbox.read,image.read")
	var op struct {
		Operation struct{ ID string } `json:"operation"`
	}
	if err := json.Unmarshal([]byte(step("create-box.json", "", "create", "box", "-o", "json")), &op); err != nil {
		t.Fatal(err)
	}
	step("ops-get.txt", "", "ops", "get", op.Operation.ID)
	step("ops-get.json", "", "ops", "get", op.Operation.ID, "-o", "json")
	step("gc.txt", "", "gc", "--dry-run")
	step("audit-verify.txt", "", "audit", "verify")
}

// TestGoldenAllOwners checks ls --all-owners: the node's administrator (root on the
// socket) sees every owner's sandboxes with an OWNER column, in table, JSON and -q (ids,
// since another owner's sandbox is reached by id); an owner without the admin
// permission is refused, told which permission it lacks.
func TestGoldenAllOwners(t *testing.T) {
	n := &node{testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"alice"}})}
	var norm normalizer
	n.must(t, "create", "mine")
	alice := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		err := Run(bg, append([]string{"--addr", n.Addr, "--token", n.Token(t, "alice")}, args...), strings.NewReader(""), &out, &errOut)
		return out.String(), errOut.String(), err
	}
	for _, name := range []string{"mine", "hers"} {
		if _, errOut, err := alice("create", name); err != nil {
			t.Fatalf("alice creates %s: %v %s", name, err, errOut)
		}
	}
	if _, errOut, err := alice("rm", "hers"); err != nil {
		t.Fatalf("alice removes hers: %v %s", err, errOut)
	}
	for _, tc := range []struct {
		file string
		args []string
	}{
		{"ls-all-owners.txt", []string{"ls", "--all-owners"}},
		{"ls-all-owners-a.txt", []string{"ls", "--all-owners", "-a"}},
		{"ls-all-owners-q.txt", []string{"ls", "--all-owners", "-q"}},
		{"ls-all-owners.json", []string{"ls", "--all-owners", "-a", "-o", "json"}},
	} {
		out, errOut, err := n.run(bg, "", tc.args...)
		wantExit(t, err, 0)
		if errOut != "" {
			t.Errorf("%s: stderr = %q, want nothing", tc.file, errOut)
		}
		got := regexp.MustCompile(`("generation": ?|"version": ?)\d+`).ReplaceAllString(norm.apply(out), "${1}0")
		t.Run(tc.file, func(t *testing.T) { golden(t, tc.file, got) })
	}
	out, errOut, err := alice("ls", "--all-owners")
	if err == nil || out != "" || !strings.Contains(errOut, "admin permission") {
		t.Errorf("alice's ls --all-owners: %v, stdout %q, stderr %q; want it refused, naming the admin permission", err, out, errOut)
	}
	if out, _, err := alice("ls", "-q"); err != nil || out != "mine\n" {
		t.Errorf("alice's own ls -q = %q, %v; want only her live sandbox", out, err)
	}
}
