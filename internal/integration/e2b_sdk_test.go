package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testenv"
	"github.com/airlockhq/airlock/internal/testenv/testca"
)

// E2B's JavaScript SDK, unmodified, drives Airlock's E2B-compatible API here: both
// planes, the control plane (X-API-Key) and the in-sandbox plane (X-Access-Token),
// on one listener that E2B_API_URL and E2B_SANDBOX_URL both point at.

// e2bSDKVersion pins the npm package e2b, E2B's JavaScript SDK.
const e2bSDKVersion = "2.51.0"

// TestE2BSDK runs testdata/e2b/quickstart.mjs, E2B's quickstart done with the SDK and
// each result checked, against a daemon with e2b_listen; then checks that the
// in-sandbox plane refuses requests without the sandbox's own access token.
func TestE2BSDK(t *testing.T) {
	pkg, node := e2bSDK(t)
	n := startE2BDaemon(t)
	dev := n.userKey(t, "dev")

	out, err := runNode(t, node, pkg, filepath.Join("testdata", "e2b", "quickstart.mjs"), n.sdkEnv(dev)...)
	if err != nil {
		t.Errorf("node quickstart.mjs: %v\n%s", err, out)
	} else {
		t.Logf("node quickstart.mjs:\n%s", out)
	}
	for _, sb := range n.sandboxes(t, dev) {
		t.Errorf("quickstart.mjs left sandbox %s (%s)", sb.SandboxID, sb.State)
	}

	// The in-sandbox plane: the sandbox's own token opens it, and nothing else does.
	mine := n.create(t, dev)
	other := n.create(t, n.userKey(t, "other"))
	for _, tc := range []struct {
		what, id, token string
		want            int
	}{
		{"the sandbox's own token", mine.SandboxID, mine.EnvdAccessToken, http.StatusOK},
		{"a wrong token", mine.SandboxID, "not-" + mine.EnvdAccessToken, http.StatusUnauthorized},
		{"no token", mine.SandboxID, "", http.StatusUnauthorized},
		{"the API key in place of the token", mine.SandboxID, dev, http.StatusUnauthorized},
		{"another user's sandbox with this sandbox's token", other.SandboxID, mine.EnvdAccessToken, http.StatusUnauthorized},
		{"a made-up sandbox and token", "sb_" + randHex(8), randHex(16), http.StatusUnauthorized},
	} {
		if got, body := n.envdCall(t, tc.id, tc.token, "/process.Process/List", "{}"); got != tc.want {
			t.Errorf("%s: POST /process.Process/List for %s = %d %s, want %d", tc.what, tc.id, got, body, tc.want)
		}
	}
	n.kill(t, dev, mine.SandboxID)
	n.kill(t, n.userKey(t, "other"), other.SandboxID)
}

// TestE2BSDKOverTLS runs testdata/e2b/tls.mjs against a daemon whose e2b_listen serves
// HTTPS (tls_cert, tls_key): the unmodified SDK at https:// URLs, trusting the test's CA
// through NODE_EXTRA_CA_CERTS; and checks the listener answers no plain HTTP.
func TestE2BSDKOverTLS(t *testing.T) {
	pkg, node := e2bSDK(t)
	ca := testca.New(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o700) // the daemon checks the key's directories are root's alone to change
	certPath, keyPath, caPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	ca.Issue(t, 1, certPath, keyPath)
	if err := os.WriteFile(caPath, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	n := startE2BDaemon(t, "tls_cert: "+certPath, "tls_key: "+keyPath)
	n.url = strings.Replace(n.url, "http://", "https://", 1)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	plain := n.hc
	n.hc = &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	dev := n.userKey(t, "dev")

	out, err := runNode(t, node, pkg, filepath.Join("testdata", "e2b", "tls.mjs"), append(n.sdkEnv(dev), "NODE_EXTRA_CA_CERTS="+caPath)...)
	if err != nil {
		t.Errorf("node tls.mjs: %v\n%s", err, out)
	}
	for _, sb := range n.sandboxes(t, dev) {
		t.Errorf("tls.mjs left sandbox %s (%s)", sb.SandboxID, sb.State)
	}
	resp, err := plain.Get(strings.Replace(n.url, "https://", "http://", 1) + "/sandboxes")
	if err != nil {
		t.Fatalf("plain HTTP to the TLS listener: %v, want its 400 answer", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("plain HTTP to the TLS listener: %s, want 400", resp.Status)
	}
}

// e2bSDK returns the directory of E2B's JavaScript SDK, installed by npmPackage, and
// the node to run it with. The SDK needs node 20.18.1 or later (its engines); where the
// system's node is older (Debian 12's nodejs is 18), node itself comes from the npm
// registry (the node-linux-ARCH package of nodeVersion), into the same cache.
func e2bSDK(t *testing.T) (pkg, node string) {
	t.Helper()
	pkg = npmPackage(t, "e2b", e2bSDKVersion)
	out, err := exec.Command("node", "-p", "process.versions.node").Output()
	if err != nil {
		t.Fatalf("node -p process.versions.node: %v", err)
	}
	var v [3]int
	fmt.Sscanf(string(out), "%d.%d.%d", &v[0], &v[1], &v[2])
	if slices.Compare(v[:], []int{20, 18, 1}) >= 0 {
		return pkg, "node"
	}
	arch := map[string]string{"amd64": "x64", "arm64": "arm64"}[runtime.GOARCH]
	if arch == "" {
		t.Skipf("needs node 20.18.1 or later for e2b@%s, found %s, and npm has no node for %s", e2bSDKVersion, strings.TrimSpace(string(out)), runtime.GOARCH)
	}
	bin := filepath.Join(npmPackage(t, "node-linux-"+arch, nodeVersion), "bin", "node")
	if out, err := exec.Command(bin, "--version").CombinedOutput(); err != nil {
		t.Fatalf("%s --version: %v\n%s", bin, err, out)
	}
	return pkg, bin
}

// nodeVersion is the node the tests fetch when the system's is too old for the SDK.
const nodeVersion = "20.20.2"

// e2bNode is a daemon serving the E2B-compatible API on a loopback port.
type e2bNode struct {
	d    *daemon
	url  string // http://127.0.0.1:PORT: both planes
	keys map[string]string
	hc   *http.Client
}

// startE2BDaemon starts a daemon with e2b_listen on a free loopback port, and extra
// lines in its configuration.
func startE2BDaemon(t *testing.T, extra ...string) *e2bNode {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	d := startDaemonB(t, append([]string{"e2b_listen: 127.0.0.1:" + port}, extra...)...)
	return &e2bNode{d: d, url: "http://127.0.0.1:" + port, keys: map[string]string{}, hc: &http.Client{Timeout: time.Minute}}
}

// userKey returns user's E2B-format API key, making the user (a developer) and the key
// the first time. Sandboxes the key still sees when the test ends are killed then,
// before the daemon's own cleanup (which does not list other users' sandboxes).
func (n *e2bNode) userKey(t *testing.T, user string) string {
	t.Helper()
	if key, ok := n.keys[user]; ok {
		return key
	}
	n.d.must("user", "create", user, "--role", "developer")
	var tok struct {
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal([]byte(n.d.must("token", "create", "--user", user, "--format", "e2b", "-o", "json")), &tok); err != nil || !strings.HasPrefix(tok.Secret, "e2b_") {
		t.Fatalf("token create --user %s --format e2b: %+v, %v", user, tok, err)
	}
	n.keys[user] = tok.Secret
	t.Cleanup(func() {
		for _, sb := range n.sandboxes(t, tok.Secret) {
			n.kill(t, tok.Secret, sb.SandboxID)
		}
	})
	return tok.Secret
}

// sdkEnv is the environment that points E2B's SDKs at this node with key.
func (n *e2bNode) sdkEnv(key string) []string {
	return []string{"E2B_API_URL=" + n.url, "E2B_SANDBOX_URL=" + n.url, "E2B_API_KEY=" + key}
}

// e2bSandbox is what the control plane answers about a sandbox.
type e2bSandbox struct {
	SandboxID       string `json:"sandboxID"`
	State           string `json:"state"`
	EnvdAccessToken string `json:"envdAccessToken"`
}

// control calls the control plane with key and returns the status and body.
func (n *e2bNode) control(t *testing.T, key, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, n.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (n *e2bNode) create(t *testing.T, key string) e2bSandbox {
	t.Helper()
	code, body := n.control(t, key, "POST", "/sandboxes", `{"templateID":"base","timeout":600}`)
	var sb e2bSandbox
	if err := json.Unmarshal(body, &sb); code != http.StatusCreated || err != nil || sb.EnvdAccessToken == "" {
		t.Fatalf("POST /sandboxes = %d %s, want 201 with an envdAccessToken", code, body)
	}
	return sb
}

func (n *e2bNode) kill(t *testing.T, key, id string) {
	t.Helper()
	if code, body := n.control(t, key, "DELETE", "/sandboxes/"+id, ""); code != http.StatusNoContent {
		t.Errorf("DELETE /sandboxes/%s = %d %s, want 204", id, code, body)
	}
}

// sandboxes lists the running and paused sandboxes key sees.
func (n *e2bNode) sandboxes(t *testing.T, key string) []e2bSandbox {
	t.Helper()
	code, body := n.control(t, key, "GET", "/v2/sandboxes?state=running,paused", "")
	var list []e2bSandbox
	if err := json.Unmarshal(body, &list); code != http.StatusOK || err != nil {
		t.Errorf("GET /v2/sandboxes = %d %s, want 200 and a list", code, body)
	}
	return list
}

// envdCall makes a Connect unary call (JSON) on sandbox id's in-sandbox plane, as the
// SDKs address it with E2B_SANDBOX_URL set, and returns the status and body.
func (n *e2bNode) envdCall(t *testing.T, id, token, procedure, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", n.url+procedure, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	resp, err := n.hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s for %s: %v", procedure, id, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// runNode runs the JavaScript module script with node and returns its combined
// output. ES modules resolve a bare import such as 'e2b' from the script's own
// directory upwards and ignore NODE_PATH, so the script is copied into a directory of
// its own beside a node_modules that links to pkg's. env is added to the environment,
// from which any E2B_ settings of the caller's are dropped. Node and whatever it
// started are killed after three minutes.
func runNode(t *testing.T, node, pkg, script string, env ...string) (string, error) {
	t.Helper()
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	modules := pkg
	for filepath.Base(modules) != "node_modules" && modules != filepath.Dir(modules) {
		modules = filepath.Dir(modules)
	}
	dir := t.TempDir()
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(script)), src, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Base(script))
	cmd.Dir = dir
	cmd.Env = append(withoutEnv(os.Environ(), "E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY", "E2B_ACCESS_TOKEN",
		"E2B_DOMAIN", "E2B_DEBUG"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (killed after 3 minutes)", err)
	}
	return out.String(), err
}

// npmPackage returns the directory of the npm package name at version, installing it
// with npm into a cache outside the repository when it is not there yet. Without node
// and npm the test skips, except in CI.
func npmPackage(t *testing.T, name, version string) string {
	t.Helper()
	var missing []string
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		msg := "needs " + strings.Join(missing, " and ") + " for the npm package " + name
		if testenv.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	base := "/var/cache/airlock-test/npm"
	if dir := os.Getenv("XDG_CACHE_HOME"); dir != "" {
		base = filepath.Join(dir, "airlock-test", "npm")
	} else if os.Geteuid() != 0 {
		dir, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		base = filepath.Join(dir, "airlock-test", "npm")
	}
	// One directory per package and version: "@scope/name" is kept as "scope+name".
	dir := filepath.Join(base, strings.NewReplacer("@", "", "/", "+").Replace(name)+"@"+version)
	pkg := filepath.Join(dir, "node_modules", filepath.FromSlash(name))
	if _, err := os.Stat(filepath.Join(pkg, "package.json")); err == nil {
		return pkg
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(base, ".install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--prefix", tmp, "--no-audit", "--no-fund", "--loglevel=error",
		name+"@"+version)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install %s@%s: %v\n%s", name, version, err, out)
	}
	// Another test process may have installed it meanwhile; either copy will do.
	if err := os.Rename(tmp, dir); err != nil && !errors.Is(err, fs.ErrExist) && !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatal(err)
	}
	return pkg
}
