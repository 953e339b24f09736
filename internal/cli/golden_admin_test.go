package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
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
