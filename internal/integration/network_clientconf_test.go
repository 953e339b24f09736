package integration

import (
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
)

// TestNetworkClientConf checks, in real sandboxes of the host image, that pip, git, npm
// and login shells are pointed at the egress proxy and the node CA by system-wide
// configuration files too, so that a program that scrubs its environment (env -i)
// still goes through the proxy; and that a sandbox without network gets the CA
// settings but no proxy.
func TestNetworkClientConf(t *testing.T) {
	w := newNetWorld(t)
	n := w.node(t)
	sb := n.Create(t, api.CreateSandboxRequest{Name: "clientconf",
		Network: &api.NetworkPolicy{Mode: "baseline", AllowPrivate: netLoopback8}})
	none := n.Create(t, api.CreateSandboxRequest{Name: "clientconf-none", Network: &api.NetworkPolicy{Mode: "none"}})

	proxy := strings.TrimSpace(mustRun(t, n, sb.Name, `printf '%s' "$HTTPS_PROXY"`))
	if !strings.HasPrefix(proxy, "http://") {
		t.Fatalf("HTTPS_PROXY in the sandbox is %q, want the proxy's URL", proxy)
	}
	const ca = "/etc/ssl/certs/ca-certificates.crt"
	has := func(t *testing.T, ref, tool string) bool {
		t.Helper()
		return run(t, n, ref, "command -v "+tool).ExitCode == 0
	}
	// The files are readable by a user other than root.
	user := uint32(1000)
	readAs := func(t *testing.T, ref, path string) string {
		t.Helper()
		res, err := n.Client.Exec(background, ref, api.ExecRequest{Argv: []string{"cat", path}, Cwd: "/tmp", UID: &user, GID: &user, Timeout: execTimeout})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("cat %s as uid %d in %s: %v %+v", path, user, ref, err, res)
		}
		return res.Stdout
	}
	wantLines := func(t *testing.T, what, got string, want ...string) {
		t.Helper()
		for _, l := range want {
			if !strings.Contains(got, l) {
				t.Errorf("%s lacks %q:\n%s", what, l, got)
			}
		}
	}

	t.Run("files", func(t *testing.T) {
		wantLines(t, "/etc/pip.conf", readAs(t, sb.Name, "/etc/pip.conf"), "[global]\n", "proxy = "+proxy+"\n", "cert = "+ca+"\n")
		wantLines(t, "/etc/gitconfig", readAs(t, sb.Name, "/etc/gitconfig"), "[http]\n", "\tproxy = "+proxy+"\n", "\tsslCAInfo = "+ca+"\n")
		wantLines(t, "/etc/npmrc", readAs(t, sb.Name, "/etc/npmrc"), "proxy="+proxy+"\n", "https-proxy="+proxy+"\n", "cafile="+ca+"\n")
		wantLines(t, "/etc/profile.d/airlock-proxy.sh", readAs(t, sb.Name, "/etc/profile.d/airlock-proxy.sh"),
			"export HTTPS_PROXY='"+proxy+"'\n", "export SSL_CERT_FILE='"+ca+"'\n")
		// Read-only: the sandbox cannot point its own clients elsewhere by editing them.
		for _, f := range []string{"/etc/pip.conf", "/etc/gitconfig", "/etc/npmrc", "/etc/profile.d/airlock-proxy.sh"} {
			mustFail(t, n, sb.Name, "echo x >> "+f)
		}
	})

	t.Run("git", func(t *testing.T) {
		if !has(t, sb.Name, "git") {
			t.Skip("no git in the image")
		}
		for key, want := range map[string]string{"http.proxy": proxy, "http.sslCAInfo": ca} {
			if got := strings.TrimSpace(mustRun(t, n, sb.Name, "env -i git config --system --get "+key)); got != want {
				t.Errorf("env -i git config --system --get %s: got %q, want %q", key, got, want)
			}
			if got := strings.TrimSpace(mustRun(t, n, sb.Name, "cd /tmp && env -i git config --get "+key)); got != want {
				t.Errorf("env -i git config --get %s: got %q, want %q", key, got, want)
			}
		}
		// Without the variables git still reaches the upstream, through the proxy: a
		// direct connection would go to the sandbox's own loopback, where the name
		// resolves. The upstream is no git server; that it saw the request is enough.
		before := w.hitsOf("pypi.org")
		res := run(t, n, sb.Name, "cd /tmp && env -i git ls-remote https://pypi.org/airlock-test.git")
		if w.hitsOf("pypi.org") == before {
			t.Errorf("env -i git ls-remote https://pypi.org/...: the upstream saw no request (exit %d, stderr %q)", res.ExitCode, res.Stderr)
		}
		if strings.Contains(res.Stderr, "certificate") || strings.Contains(res.Stderr, "SSL") {
			t.Errorf("env -i git ls-remote: TLS failed: %s", res.Stderr)
		}
		// The control: without the system config the request never leaves the sandbox.
		before = w.hitsOf("pypi.org")
		run(t, n, sb.Name, "cd /tmp && env -i GIT_CONFIG_NOSYSTEM=1 git ls-remote https://pypi.org/airlock-test.git")
		if got := w.hitsOf("pypi.org"); got != before {
			t.Errorf("git without the system config reached the upstream (%d requests): the check above proves nothing", got-before)
		}
	})

	t.Run("pip", func(t *testing.T) {
		if !has(t, sb.Name, "python3") || run(t, n, sb.Name, "python3 -m pip --version").ExitCode != 0 {
			t.Skip("no python3 with pip in the image")
		}
		out := mustRun(t, n, sb.Name, "env -i python3 -m pip config list")
		wantLines(t, "env -i python3 -m pip config list", out, "global.proxy='"+proxy+"'", "global.cert='"+ca+"'")
		// pip, without the variables, asks the (test) index through the proxy and trusts
		// the node CA. The index answers a page without links: no distribution found.
		before := w.hitsOf("pypi.org", "GET")
		res := run(t, n, sb.Name, "cd /tmp && env -i python3 -m pip download --no-deps --no-cache-dir --retries 0 --timeout 15 -d /tmp/dl airlock-clientconf-probe")
		if w.hitsOf("pypi.org", "GET") == before {
			t.Errorf("env -i pip download: the index saw no request (exit %d, stderr %q)", res.ExitCode, res.Stderr)
		}
		if strings.Contains(res.Stderr, "CERTIFICATE_VERIFY_FAILED") || strings.Contains(res.Stderr, "ProxyError") {
			t.Errorf("env -i pip download: %s", res.Stderr)
		}
		// The control: without its config files pip never reaches the index.
		before = w.hitsOf("pypi.org", "GET")
		run(t, n, sb.Name, "cd /tmp && env -i PIP_CONFIG_FILE=/dev/null python3 -m pip download --no-deps --no-cache-dir --retries 0 --timeout 15 -d /tmp/dl airlock-clientconf-probe")
		if got := w.hitsOf("pypi.org", "GET"); got != before {
			t.Errorf("pip without its config files reached the index (%d requests): the check above proves nothing", got-before)
		}
	})

	t.Run("npm", func(t *testing.T) {
		if !has(t, sb.Name, "npm") || !has(t, sb.Name, "node") {
			t.Skip("no npm in the image")
		}
		// npm's own global config lives under its prefix (/usr/etc, /usr/local/etc); it
		// reads /etc/npmrc when NPM_CONFIG_GLOBALCONFIG says so.
		for key, want := range map[string]string{"https-proxy": proxy, "proxy": proxy, "cafile": ca} {
			got := strings.TrimSpace(mustRun(t, n, sb.Name, "cd /tmp && env -i HOME=/tmp PATH=/usr/bin:/bin NPM_CONFIG_GLOBALCONFIG=/etc/npmrc npm config get "+key))
			if got != want {
				t.Errorf("npm config get %s with only NPM_CONFIG_GLOBALCONFIG set: got %q, want %q", key, got, want)
			}
		}
	})

	t.Run("shell", func(t *testing.T) {
		got := mustRun(t, n, sb.Name, `env -i /bin/sh -c '. /etc/profile.d/airlock-proxy.sh; printf "%s %s" "$HTTPS_PROXY" "$SSL_CERT_FILE"'`)
		if got != proxy+" "+ca {
			t.Errorf("a shell that sources the profile script: got %q, want %q", got, proxy+" "+ca)
		}
		if run(t, n, sb.Name, "test -f /etc/profile && grep -q profile.d /etc/profile").ExitCode != 0 {
			t.Skip("the image's /etc/profile does not source /etc/profile.d")
		}
		if got := mustRun(t, n, sb.Name, `env -i /bin/sh -lc 'printf %s "$HTTPS_PROXY"'`); got != proxy {
			t.Errorf("a login shell with a clean environment: HTTPS_PROXY %q, want %q", got, proxy)
		}
	})

	t.Run("none", func(t *testing.T) {
		for _, f := range []string{"/etc/pip.conf", "/etc/gitconfig", "/etc/npmrc", "/etc/profile.d/airlock-proxy.sh"} {
			body := readAs(t, none.Name, f)
			if !strings.Contains(body, ca) {
				t.Errorf("%s without network lacks the CA bundle:\n%s", f, body)
			}
			for _, line := range strings.Split(body, "\n") {
				if strings.Contains(strings.ToLower(line), "proxy") && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, ";") {
					t.Errorf("%s without network names a proxy: %q", f, line)
				}
			}
		}
		if has(t, none.Name, "git") {
			if res := run(t, n, none.Name, "env -i git config --system --get http.proxy"); res.ExitCode == 0 {
				t.Errorf("git has a proxy without network: %q", res.Stdout)
			}
			if got := strings.TrimSpace(mustRun(t, n, none.Name, "env -i git config --system --get http.sslCAInfo")); got != ca {
				t.Errorf("git's CA without network: got %q, want %q", got, ca)
			}
		}
	})
}
