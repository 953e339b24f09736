package integration

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/testenv"
)

// leakForms are the ways a value could be written down: in the clear, in base64 (std
// and URL alphabets) and in hex.
func leakForms(v string) map[string][]byte {
	return map[string][]byte{
		"plain":     []byte(v),
		"base64":    []byte(base64.StdEncoding.EncodeToString([]byte(v))),
		"base64url": []byte(base64.RawURLEncoding.EncodeToString([]byte(v))),
		"hex":       []byte(hex.EncodeToString([]byte(v))),
	}
}

// basicForm is the basic credentials "bot:VALUE" as they go upstream, in base64.
func basicForm(v string) string { return base64.StdEncoding.EncodeToString([]byte("bot:" + v)) }

// secretValue is a value no other test or file could hold by chance.
func secretValue(prefix string) string {
	b := make([]byte, 18)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func shaHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestSecretsAndSessionCredential runs the whole of brokered secrets and the session
// credential on a real node with its real egress proxy, against the test internet's
// HTTPS upstream: the value is substituted only for the secret's hosts, the same
// placeholder elsewhere is refused and audited, a secret's host opens in deny_all, files
// and variables are delivered, revocation stops delivery at once, code inside reaches
// the API with its creator's identity (narrowed by --role), and then no value is found
// anywhere: the state directory (database, snapshot chunks, layers), the daemon's log,
// the API's answers (what every exec printed among them: what the sandbox received,
// echoes of its requests included), and every process's environment and command line.
func TestSecretsAndSessionCredential(t *testing.T) {
	w := newNetWorld(t)
	netRequireHostNetns(t)
	logs := &testenv.LockedBuffer{}
	n := testenv.NewNode(t, testenv.Options{Network: true, UpstreamDNS: w.dns.addr, ExtraCAs: []string{w.caFile}, LogTo: logs})
	var answers [][]byte // every API answer the test got, scanned at the end
	keep := func(v any) {
		b, _ := json.Marshal(v)
		answers = append(answers, b)
	}
	var outer, cur testing.TB = t, t // cur: the running subtest, which exec fails
	exec := func(ref, shell string) string {
		t := cur
		t.Helper()
		res := run(t, n, ref, shell)
		keep(res)
		if res.State != api.ExecSucceeded || res.ExitCode != 0 {
			t.Fatalf("exec %q in %s: %s exit %d\nstdout: %s\nstderr: %s", shell, ref, res.State, res.ExitCode, res.Stdout, res.Stderr)
		}
		return res.Stdout
	}

	values := map[string]string{"gh": secretValue("ghp_"), "db": secretValue("pw-"), "envkey": secretValue("sk-")}
	for name, v := range values {
		s, err := n.Client.CreateSecret(background, api.CreateSecretRequest{Name: name, Type: "token",
			AllowedHosts: []string{"api.example.test"}, Value: v + "\n"})
		if err != nil {
			t.Fatal(err)
		}
		keep(s)
	}

	open := n.Create(t, api.CreateSandboxRequest{Name: "sec-open", Network: &api.NetworkPolicy{Mode: "unrestricted", AllowPrivate: netLoopback8}})
	deny := n.Create(t, api.CreateSandboxRequest{Name: "sec-deny", Network: &api.NetworkPolicy{Mode: "deny_all", AllowPrivate: netLoopback8}})
	viewer := n.Create(t, api.CreateSandboxRequest{Name: "sec-viewer", Role: "viewer", Network: &api.NetworkPolicy{Mode: "deny_all"}})
	none := n.Create(t, api.CreateSandboxRequest{Name: "sec-none", Network: &api.NetworkPolicy{Mode: "none"}})

	bind := func(name, sb string, req api.BindSecretRequest) *api.BindSecretResult {
		t.Helper()
		req.Sandbox = sb
		res, err := n.Client.BindSecret(background, name, req)
		if err != nil {
			t.Fatalf("bind %s to %s: %v", name, sb, err)
		}
		keep(res)
		return res
	}
	bind("gh", open.Name, api.BindSecretRequest{Target: "GH_TOKEN", Headers: []string{"Authorization", "x-api-key"}})
	bind("gh", deny.Name, api.BindSecretRequest{Target: "GH_TOKEN", Scope: "execution"})
	// gVisor's sandboxes take new mounts only as they start; runc's at once.
	liveMounts, wantApplies := os.Getenv("AIRLOCK_TEST_RUNTIME") != "runsc", "now"
	if !liveMounts {
		wantApplies = "at the next start"
	}
	if res := bind("db", open.Name, api.BindSecretRequest{Target: "/etc/app/db-password", Delivery: "file"}); res.Applies != wantApplies {
		t.Errorf("a file bound to a running sandbox applies %q, want %s", res.Applies, wantApplies)
	}
	if liveMounts {
		if got := exec(open.Name, `sha256sum < /etc/app/db-password | cut -d' ' -f1`); strings.TrimSpace(got) != shaHex(values["db"]) {
			t.Error("file delivery: a file bound to a running sandbox does not hold the value at once")
		}
		if got := exec(open.Name, `touch /etc/app/db-password 2>&1 || true`); !strings.Contains(got, "Read-only") {
			t.Errorf("a file bound to a running sandbox is writable: %q", got)
		}
	}
	if res := bind("envkey", open.Name, api.BindSecretRequest{Target: "API_KEY", Delivery: "env"}); res.Binding.Risk == "" {
		t.Error("env delivery is not marked as the higher-risk choice")
	}

	t.Run("bad bindings", func(t *testing.T) {
		cur = t
		_, err := n.Client.BindSecret(background, "gh", api.BindSecretRequest{Sandbox: none.Name, Target: "GH_TOKEN"})
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "mode none") {
			t.Errorf("proxy delivery to a sandbox in mode none: %v, want refused naming the rule", err)
		}
		if _, err := n.Client.BindSecret(background, "gh", api.BindSecretRequest{Sandbox: open.Name, Target: "X", Hosts: []string{"evil.example"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("a host outside the secret's: %v, want invalid_argument", err)
		}
	})

	var placeholder string
	t.Run("substitution", func(t *testing.T) {
		cur = t
		defer func() { cur = outer }()
		placeholder = strings.TrimSpace(exec(open.Name, `printf %s "$GH_TOKEN"`))
		if !strings.HasPrefix(placeholder, "al_secret_") || strings.Contains(placeholder, values["gh"]) {
			t.Fatalf("the sandbox holds %q, want a placeholder", placeholder)
		}
		out := exec(open.Name, `curl -sS --fail-with-body -H "Authorization: Bearer $GH_TOKEN" -H "X-Api-Key: $GH_TOKEN" https://api.example.test/`)
		if !strings.Contains(out, "hello from api.example.test") {
			t.Fatalf("substituted request: %q", out)
		}
		seen, _ := w.lastSeen("api.example.test")
		if got := seen.Header.Get("Authorization"); got != "Bearer "+values["gh"] {
			t.Errorf("the upstream got Authorization %q, want the real value", got)
		}
		if got := seen.Header.Get("X-Api-Key"); got != values["gh"] {
			t.Errorf("the upstream got X-Api-Key %q, want the real value", got)
		}
		// Basic auth; never over plain http, where the value would travel in the clear.
		exec(open.Name, `curl -sS --fail-with-body -u "bot:$GH_TOKEN" https://api.example.test/`)
		seen, _ = w.lastSeen("api.example.test")
		if user, pass, ok := (&http.Request{Header: seen.Header}).BasicAuth(); !ok || user != "bot" || pass != values["gh"] {
			t.Errorf("basic auth at the upstream: %q %q %v, want bot and the real value", user, pass, ok)
		}

		// A header the binding does not name: refused, never sent.
		before := w.hitsOf("api.example.test")
		if code := exec(open.Name, `curl -s -o /dev/null -w '%{http_code}' -H "Origin: https://$GH_TOKEN" https://api.example.test/`); code != "403" ||
			w.hitsOf("api.example.test") != before {
			t.Errorf("the placeholder in Origin: HTTP %s, upstream hits %d; want 403 and none", code, w.hitsOf("api.example.test")-before)
		}
		// An upstream that echoes the request (headers, body, gzip body, basic auth)
		// hands the sandbox the value starred out; the scan at the end looks at every
		// exec's output too.
		stars := strings.Repeat("*", len(values["gh"]))
		for _, q := range []string{"", "?gzip"} {
			out := exec(open.Name, `curl -sS -i --compressed --fail-with-body -H "Authorization: Bearer $GH_TOKEN" -H "X-Api-Key: $GH_TOKEN" https://api.example.test/echo`+q)
			if strings.Count(out, stars) < 3 || strings.Contains(out, values["gh"]) {
				t.Errorf("echo%s: the sandbox got\n%s\nwant the value starred out in the header and the body", q, out)
			}
			if seen, _ := w.lastSeen("api.example.test"); seen.Header.Get("X-Api-Key") != values["gh"] {
				t.Errorf("echo%s: the upstream got X-Api-Key %q, want the real value", q, seen.Header.Get("X-Api-Key"))
			}
		}
		if out := exec(open.Name, `curl -sS -i --fail-with-body -u "bot:$GH_TOKEN" https://api.example.test/echo`); strings.Contains(out, basicForm(values["gh"])) ||
			!strings.Contains(out, "Basic "+strings.Repeat("*", len(basicForm(values["gh"])))) {
			t.Errorf("basic auth echoed: the sandbox got\n%s\nwant the credentials starred out", out)
		}

		if code := exec(open.Name, `curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $GH_TOKEN" http://api.example.test/`); code != "403" {
			t.Errorf("the placeholder over plain http: HTTP %s, want 403", code)
		}
		// The same placeholder to another host: refused, never sent, audited.
		before = w.hitsOf("other.example.test")
		code := exec(open.Name, `curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $GH_TOKEN" https://other.example.test/`)
		if code != "403" || w.hitsOf("other.example.test") != before {
			t.Errorf("placeholder to another host: HTTP %s, upstream hits %d; want 403 and none", code, w.hitsOf("other.example.test")-before)
		}
		if code := exec(open.Name, `curl -s -o /dev/null -w '%{http_code}' https://other.example.test/`); code != "200" {
			t.Errorf("the other host without the placeholder: HTTP %s, want 200 (the refusal was the placeholder's)", code)
		}
		keep(netWaitEgress(t, n, open.Name, "the refused placeholder", func(r api.EgressRecord) bool {
			return !r.Allowed && r.Host == "other.example.test" && strings.Contains(r.Reason, `"gh"`)
		}))

		// A secret's host opens in deny_all, with every method, while pypi stays shut.
		out = exec(deny.Name, `curl -sS --fail-with-body -X POST --data x -H "Authorization: Bearer $GH_TOKEN" https://api.example.test/`)
		if !strings.Contains(out, "POST 1 bytes") {
			t.Errorf("POST to the secret's host from deny_all: %q", out)
		}
		if code := exec(deny.Name, `curl -s -o /dev/null -w '%{http_code} %{http_connect}' https://pypi.org/; true`); !strings.Contains(code, "403") {
			t.Errorf("pypi from deny_all with a secret bound: HTTP %s, want 403", code)
		}
	})

	t.Run("session credential", func(t *testing.T) {
		cur = t
		defer func() { cur = outer }()
		whoami := func(ref, flags string) api.WhoAmI {
			t.Helper()
			out := exec(ref, `curl -sS --fail-with-body `+flags+` -H "Authorization: Bearer $(cat /run/airlock/session/token)" http://airlock.internal/v1/whoami`)
			var who api.WhoAmI
			if err := json.Unmarshal([]byte(out), &who); err != nil {
				t.Fatalf("whoami from %s: %q", ref, out)
			}
			return who
		}
		token := exec(deny.Name, `cat /run/airlock/session/token`)
		if !strings.HasPrefix(token, "al_session_") {
			t.Errorf("the session token file holds %q, want a placeholder", token)
		}
		if who := whoami(deny.Name, ""); who.User != "local" || who.Sandbox != deny.ID {
			t.Errorf("whoami through the proxy from deny_all: %+v, want local", who)
		}
		if who := whoami(deny.Name, "--noproxy '*'"); who.User != "local" {
			t.Errorf("whoami transparently from deny_all: %+v, want local", who)
		}
		// The airlock CLI, copied in, finds the API and the credential on its own.
		cli, err := os.Open(testenv.Binary(t))
		if err != nil {
			t.Fatal(err)
		}
		_, err = n.Client.Upload(background, deny.Name, "/root/airlock", 0o755, cli)
		cli.Close()
		if err != nil {
			t.Fatal(err)
		}
		var cliWho api.WhoAmI
		if out := exec(deny.Name, `/root/airlock whoami -o json`); json.Unmarshal([]byte(out), &cliWho) != nil || cliWho.Sandbox != deny.ID {
			t.Errorf("airlock whoami inside the sandbox: %q", out)
		}
		if who := whoami(viewer.Name, ""); !slices.Equal(who.Roles, []string{"viewer"}) {
			t.Errorf("whoami from a sandbox created with --role viewer: %+v", who)
		}
		// The viewer role cannot create; the owner's own roles could.
		create := `curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' --data '{"name":"x","image":"no-such-image","pull":"never"}' ` +
			`-H "Authorization: Bearer $(cat /run/airlock/session/token)" http://airlock.internal/v1/sandboxes`
		if code := exec(viewer.Name, create); code != "403" {
			t.Errorf("create from a viewer sandbox: HTTP %s, want 403", code)
		}
		if code := exec(deny.Name, create); code == "403" || code == "401" {
			t.Errorf("create from an admin's sandbox: HTTP %s, want past authorisation", code)
		}
		if code := exec(deny.Name, `curl -s -o /dev/null -w '%{http_code}' http://airlock.internal/v1/whoami`); code != "401" {
			t.Errorf("the API from a sandbox without its credential: HTTP %s, want 401", code)
		}
		// Its owner's secrets and other sandboxes are in no answer it gets.
		get := func(path string) string {
			return exec(deny.Name, `curl -sS -w ' HTTP %{http_code}' -H "Authorization: Bearer $(cat /run/airlock/session/token)" http://airlock.internal`+path)
		}
		// The secret's name as the API would write it, and its value: a bare "gh" is
		// also in one sandbox id in a few dozen, which the refusal names.
		if out := get("/v1/secrets"); !strings.HasSuffix(out, "HTTP 403") || strings.Contains(out, `"gh"`) || strings.Contains(out, values["gh"]) {
			t.Errorf("the owner's secrets from inside: %q, want 403", out)
		}
		for _, path := range []string{"/v1/sandboxes", "/v1/images", "/v1/status"} {
			out := get(path)
			if !strings.HasSuffix(out, "HTTP 200") || strings.Contains(out, open.Name) || strings.Contains(out, viewer.ID) {
				t.Errorf("GET %s from inside: %q, want 200 naming none of its owner's other sandboxes", path, out)
			}
		}
		if out := get("/v1/status"); !strings.Contains(out, `"sandboxes":1,`) {
			t.Errorf("the status from inside: %q, want it to count only its own sandbox", out)
		}
	})

	t.Run("file and env delivery", func(t *testing.T) {
		cur = t
		defer func() { cur = outer }()
		if got := exec(open.Name, `printf %s "$API_KEY" | sha256sum | cut -d' ' -f1`); strings.TrimSpace(got) != shaHex(values["envkey"]) {
			t.Error("env delivery: the execution did not get the value")
		}
		if _, err := n.Client.Suspend(background, open.Name); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Client.Resume(background, open.Name); err != nil {
			t.Fatal(err)
		}
		if got := exec(open.Name, `sha256sum < /etc/app/db-password | cut -d' ' -f1`); strings.TrimSpace(got) != shaHex(values["db"]) {
			t.Error("file delivery: the file does not hold the value after the restart")
		}
		// The scan below finds a delivered value where it is meant to be: on the tmpfs
		// outside the state directory.
		var onTmpfs bool
		filepath.WalkDir(n.SecretsDir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				onTmpfs = onTmpfs || len(scanFile(p, map[string][]byte{"db": []byte(values["db"])})) > 0
			}
			return nil
		})
		if !onTmpfs {
			t.Errorf("the file delivery's value is not on the secrets tmpfs %s", n.SecretsDir)
		}
		// Not in the agent's (pid 1's) environment or command line.
		exec(open.Name, `v=$(cat /etc/app/db-password); k="$API_KEY"; for f in /proc/1/environ /proc/1/cmdline; do `+
			`if grep -qaF -e "$v" -e "$k" $f; then echo "found in $f" >&2; exit 1; fi; done`)
	})

	t.Run("snapshot and fork", func(t *testing.T) {
		cur = t
		defer func() { cur = outer }()
		snap, err := n.Client.Snapshot(background, open.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		keep(snap)
		f, err := n.Client.Fork(background, open.Name, api.ForkRequest{Name: "sec-fork"})
		if err != nil {
			t.Fatal(err)
		}
		keep(f)
		if got := exec("sec-fork", `cat /etc/app/db-password 2>/dev/null | wc -c`); strings.TrimSpace(got) != "0" {
			t.Errorf("a fork holds %s bytes of the parent's delivered file, want none", strings.TrimSpace(got))
		}
	})

	t.Run("revocation", func(t *testing.T) {
		cur = t
		defer func() { cur = outer }()
		if _, err := n.Client.RevokeSecret(background, "gh"); err != nil {
			t.Fatal(err)
		}
		before := w.hitsOf("api.example.test")
		code := exec(open.Name, `curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer `+placeholder+`" https://api.example.test/`)
		if code != "403" || w.hitsOf("api.example.test") != before {
			t.Errorf("a revoked secret's placeholder: HTTP %s, upstream hits %d; want 403 and none", code, w.hitsOf("api.example.test")-before)
		}
		if _, err := n.Client.RevokeSecret(background, "db"); err != nil {
			t.Fatal(err)
		}
		if got := exec(open.Name, `wc -c < /etc/app/db-password`); strings.TrimSpace(got) != "0" {
			t.Errorf("a revoked file delivery still holds %s bytes", strings.TrimSpace(got))
		}
	})

	cur = t
	// Everything the node wrote or said, scanned for every form of every value.
	for _, c := range []*client.Client{n.Client} {
		list, _ := c.Secrets(background)
		keep(list)
		events, _ := c.Events(background, open.Name, 0)
		keep(events)
		egress, _ := c.EgressLog(background, open.Name, 0)
		keep(egress)
		audit, _ := c.AuditLog(background, client.AuditFilter{})
		keep(audit)
	}
	needles := map[string][]byte{"gh (basic credentials)": []byte(basicForm(values["gh"]))}
	for name, v := range values {
		for form, needle := range leakForms(v) {
			needles[name+" ("+form+")"] = needle
		}
	}
	for what, needle := range needles {
		for i, a := range answers {
			if bytes.Contains(a, needle) {
				t.Errorf("secret %s is in API answer %d: %.300s", what, i, a)
			}
		}
		if bytes.Contains(logs.Bytes(), needle) {
			t.Errorf("secret %s is in the daemon's log", what)
		}
	}
	var files []string
	filepath.WalkDir(n.Dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		files = append(files, filepath.Join(p, "environ"), filepath.Join(p, "cmdline"))
	}
	for _, f := range files {
		for _, what := range scanFile(f, needles) {
			t.Errorf("secret %s is in %s", what, f)
		}
	}
}

// scanFile reads path once, in chunks that overlap by the longest needle, and names
// the needles it holds.
func scanFile(path string, needles map[string][]byte) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	longest := 0
	for _, n := range needles {
		longest = max(longest, len(n))
	}
	buf := make([]byte, 4<<20)
	keep := 0
	var hits []string
	found := map[string]bool{}
	for {
		k, err := f.Read(buf[keep:])
		data := buf[:keep+k]
		for what, n := range needles {
			if !found[what] && bytes.Contains(data, n) {
				found[what] = true
				hits = append(hits, what)
			}
		}
		if err != nil || k == 0 {
			return hits
		}
		keep = min(longest-1, len(data))
		copy(buf, data[len(data)-keep:])
	}
}
