package network

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/airlockhq/airlock/internal/runtime"
)

const (
	testProxy = "http://10.203.0.1:41234"
	testCA    = "/etc/ssl/certs/ca-certificates.crt"
)

func TestClientConfFiles(t *testing.T) {
	got := map[string]string{}
	for _, f := range (clientConf{Proxy: testProxy, CAFile: testCA}).files() {
		got[f.Destination] = string(f.Body)
	}
	want := map[string]string{
		"/etc/pip.conf": "# Written by Airlock for this sandbox: it points pip at the node's egress proxy and CA.\n" +
			"[global]\n" +
			"proxy = http://10.203.0.1:41234\n" +
			"cert = /etc/ssl/certs/ca-certificates.crt\n",
		"/etc/gitconfig": "# Written by Airlock for this sandbox: it points git at the node's egress proxy and CA.\n" +
			"[http]\n" +
			"\tproxy = http://10.203.0.1:41234\n" +
			"\tsslCAInfo = /etc/ssl/certs/ca-certificates.crt\n",
		"/etc/npmrc": "; Written by Airlock for this sandbox: it points npm at the node's egress proxy and CA.\n" +
			"proxy=http://10.203.0.1:41234\n" +
			"https-proxy=http://10.203.0.1:41234\n" +
			"noproxy=localhost,127.0.0.1,::1\n" +
			"cafile=/etc/ssl/certs/ca-certificates.crt\n",
		"/etc/profile.d/airlock-proxy.sh": "# Written by Airlock for this sandbox: it points login shells at the node's egress proxy and CA.\n" +
			"export SSL_CERT_FILE='/etc/ssl/certs/ca-certificates.crt'\n" +
			"export REQUESTS_CA_BUNDLE='/etc/ssl/certs/ca-certificates.crt'\n" +
			"export NODE_EXTRA_CA_CERTS='/etc/ssl/certs/ca-certificates.crt'\n" +
			"export CURL_CA_BUNDLE='/etc/ssl/certs/ca-certificates.crt'\n" +
			"export PIP_CERT='/etc/ssl/certs/ca-certificates.crt'\n" +
			"export GIT_SSL_CAINFO='/etc/ssl/certs/ca-certificates.crt'\n" +
			"export NPM_CONFIG_CAFILE='/etc/ssl/certs/ca-certificates.crt'\n" +
			"export NPM_CONFIG_GLOBALCONFIG='/etc/npmrc'\n" +
			"export HTTP_PROXY='http://10.203.0.1:41234'\n" +
			"export HTTPS_PROXY='http://10.203.0.1:41234'\n" +
			"export http_proxy='http://10.203.0.1:41234'\n" +
			"export https_proxy='http://10.203.0.1:41234'\n" +
			"export NPM_CONFIG_PROXY='http://10.203.0.1:41234'\n" +
			"export NPM_CONFIG_HTTPS_PROXY='http://10.203.0.1:41234'\n" +
			"export PIP_PROXY='http://10.203.0.1:41234'\n" +
			"export NO_PROXY='localhost,127.0.0.1,::1'\n" +
			"export no_proxy='localhost,127.0.0.1,::1'\n",
	}
	for dst, w := range want {
		if got[dst] != w {
			t.Errorf("%s:\ngot:\n%s\nwant:\n%s", dst, got[dst], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got files for %v, want %d", slices.Sorted(maps.Keys(got)), len(want))
	}
}

// TestClientConfNone: without network (mode none) no file names a proxy; the CA
// settings stay.
func TestClientConfNone(t *testing.T) {
	c := clientConf{CAFile: testCA}
	for _, f := range c.files() {
		body := string(f.Body)
		for _, line := range strings.Split(body, "\n") {
			if strings.Contains(strings.ToLower(line), "proxy") && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, ";") {
				t.Errorf("%s without network: line %q names a proxy", f.Destination, line)
			}
		}
		if !strings.Contains(body, testCA) {
			t.Errorf("%s without network lacks the CA bundle:\n%s", f.Destination, body)
		}
	}
	for _, kv := range c.env() {
		if strings.Contains(strings.ToLower(kv), "proxy=") {
			t.Errorf("variable %s without network", kv)
		}
	}
}

// TestClientConfEnv: the variables are the ones the sandboxes always had, plus npm's
// global config file; the login shells' script exports exactly them.
func TestClientConfEnv(t *testing.T) {
	c := clientConf{Proxy: testProxy, CAFile: testCA}
	env := c.env()
	for _, want := range []string{"SSL_CERT_FILE=" + testCA, "REQUESTS_CA_BUNDLE=" + testCA, "NODE_EXTRA_CA_CERTS=" + testCA,
		"CURL_CA_BUNDLE=" + testCA, "PIP_CERT=" + testCA, "GIT_SSL_CAINFO=" + testCA, "NPM_CONFIG_CAFILE=" + testCA,
		"NPM_CONFIG_GLOBALCONFIG=/etc/npmrc", "HTTP_PROXY=" + testProxy, "HTTPS_PROXY=" + testProxy,
		"http_proxy=" + testProxy, "https_proxy=" + testProxy, "NPM_CONFIG_PROXY=" + testProxy,
		"NPM_CONFIG_HTTPS_PROXY=" + testProxy, "PIP_PROXY=" + testProxy,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1"} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %s: %v", want, env)
		}
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	if _, err := writeClientConf(dir, c); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("/usr/bin/env", "-i", sh, "-c", ". "+filepath.Join(dir, "profile.sh")+"; env").Output()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, kv := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		got[kv] = true
	}
	for _, kv := range env {
		if !got[kv] {
			t.Errorf("a shell that sources profile.sh lacks %s:\n%s", kv, out)
		}
	}
}

// TestClientConfWrite: writeClientConf writes every file before returning read-only
// mounts of them, writes the same bytes every time, and rewrites a changed file in
// place (a running sandbox's bind mount holds its inode).
func TestClientConfWrite(t *testing.T) {
	dir := t.TempDir()
	c := clientConf{Proxy: testProxy, CAFile: testCA}
	mounts, err := writeClientConf(dir, c)
	if err != nil {
		t.Fatal(err)
	}
	wantMounts := []runtime.Mount{
		{Source: filepath.Join(dir, "pip.conf"), Destination: "/etc/pip.conf", ReadOnly: true},
		{Source: filepath.Join(dir, "gitconfig"), Destination: "/etc/gitconfig", ReadOnly: true},
		{Source: filepath.Join(dir, "npmrc"), Destination: "/etc/npmrc", ReadOnly: true},
		{Source: filepath.Join(dir, "profile.sh"), Destination: "/etc/profile.d/airlock-proxy.sh", ReadOnly: true},
	}
	if !reflect.DeepEqual(mounts, wantMounts) {
		t.Fatalf("mounts:\ngot  %+v\nwant %+v", mounts, wantMounts)
	}
	files := c.files()
	inodes := map[string]uint64{}
	for i, m := range mounts {
		b, err := os.ReadFile(m.Source)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != string(files[i].Body) {
			t.Errorf("%s: got %q, want %q", m.Source, b, files[i].Body)
		}
		fi, _ := os.Stat(m.Source)
		if fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v, want 0644 (sandbox users read it through an id mapping)", m.Source, fi.Mode())
		}
		inodes[m.Source] = fi.Sys().(*syscall.Stat_t).Ino
	}
	if again, err := writeClientConf(dir, c); err != nil || !reflect.DeepEqual(again, mounts) {
		t.Errorf("second write: %v %+v", err, again)
	}

	// The daemon restarted and the proxy listens on another port.
	c2 := clientConf{Proxy: "http://10.203.0.1:5000", CAFile: testCA}
	if _, err := writeClientConf(dir, c2); err != nil {
		t.Fatal(err)
	}
	for i, f := range c2.files() {
		src := mounts[i].Source
		b, _ := os.ReadFile(src)
		if string(b) != string(f.Body) {
			t.Errorf("%s after the change: got %q, want %q", src, b, f.Body)
		}
		fi, _ := os.Stat(src)
		if ino := fi.Sys().(*syscall.Stat_t).Ino; ino != inodes[src] {
			t.Errorf("%s was replaced (inode %d → %d), not rewritten in place", src, inodes[src], ino)
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}

// TestClientConfGit: git itself reads the proxy and CA from the file.
func TestClientConfGit(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	if _, err := writeClientConf(dir, clientConf{Proxy: testProxy, CAFile: testCA}); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"http.proxy": testProxy, "http.sslcainfo": testCA} {
		out, err := exec.Command(git, "config", "--file", filepath.Join(dir, "gitconfig"), "--get", key).Output()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("git config --get %s: got %q (%v), want %q", key, out, err, want)
		}
	}
}
