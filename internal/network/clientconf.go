package network

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockhq/airlock/internal/durable"
	"github.com/airlockhq/airlock/internal/runtime"
)

// A sandbox's clients are pointed at the node's egress proxy and CA twice: through
// environment variables, and through the system-wide configuration files of the
// clients that have one (pip, git, npm, login shells), so that a program that scrubs
// its environment (env -i, a subprocess with a clean env, sudo, cron-like runners)
// still goes through the proxy and trusts the node CA. The files are written per
// sandbox and bind-mounted read-only over the sandbox's own, like resolv.conf.
//
// Paths inside a sandbox. npm reads its global config from $PREFIX/etc/npmrc, and the
// prefix depends on the image (/usr/etc for Debian's npm, /usr/local/etc for node
// images); both live under /usr, which an image may bring as a read-only bind mount
// (the host image does), where a mount target cannot be created. The npmrc is
// therefore mounted at /etc/npmrc and NPM_CONFIG_GLOBALCONFIG points npm at it; npm
// run with a scrubbed environment does not see it.
const (
	pipConfPath    = "/etc/pip.conf"
	gitConfigPath  = "/etc/gitconfig"
	npmrcPath      = "/etc/npmrc"
	profileDPath   = "/etc/profile.d/airlock-proxy.sh"
	noProxyDefault = "localhost,127.0.0.1,::1"
)

// clientConf is what a sandbox's clients are configured with.
type clientConf struct {
	// Proxy is the egress proxy's URL ("http://ip:port"); empty when the sandbox has
	// no network (mode none): then only the CA settings are written.
	Proxy string
	// CAFile is the CA bundle's path inside the sandbox.
	CAFile string
}

// clientFile is one configuration file: its name in the sandbox's directory on the
// host, where it is mounted in the sandbox, and its content.
type clientFile struct {
	Name, Destination string
	Body              []byte
}

// env is the variables that point clients at the CA bundle and the proxy.
func (c clientConf) env() []string {
	ca := c.CAFile
	env := []string{
		"SSL_CERT_FILE=" + ca, "REQUESTS_CA_BUNDLE=" + ca, "NODE_EXTRA_CA_CERTS=" + ca,
		"CURL_CA_BUNDLE=" + ca, "PIP_CERT=" + ca, "GIT_SSL_CAINFO=" + ca,
		"NPM_CONFIG_CAFILE=" + ca, "NPM_CONFIG_GLOBALCONFIG=" + npmrcPath,
	}
	if c.Proxy != "" {
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NPM_CONFIG_PROXY", "NPM_CONFIG_HTTPS_PROXY", "PIP_PROXY"} {
			env = append(env, k+"="+c.Proxy)
		}
		env = append(env, "NO_PROXY="+noProxyDefault, "no_proxy="+noProxyDefault)
	}
	return env
}

// header is a file's first line, a comment saying where it comes from.
func header(comment, what string) string {
	return fmt.Sprintf("%s Written by Airlock for this sandbox: it points %s at the node's egress proxy and CA.\n", comment, what)
}

// files is the configuration files, in a fixed order, each with deterministic content.
func (c clientConf) files() []clientFile {
	var pip, git, npm, sh strings.Builder

	pip.WriteString(header("#", "pip"))
	pip.WriteString("[global]\n")
	if c.Proxy != "" {
		pip.WriteString("proxy = " + c.Proxy + "\n")
	}
	pip.WriteString("cert = " + c.CAFile + "\n")

	git.WriteString(header("#", "git"))
	git.WriteString("[http]\n")
	if c.Proxy != "" {
		git.WriteString("\tproxy = " + c.Proxy + "\n")
	}
	git.WriteString("\tsslCAInfo = " + c.CAFile + "\n")

	npm.WriteString(header(";", "npm"))
	if c.Proxy != "" {
		npm.WriteString("proxy=" + c.Proxy + "\n")
		npm.WriteString("https-proxy=" + c.Proxy + "\n")
		npm.WriteString("noproxy=" + noProxyDefault + "\n")
	}
	npm.WriteString("cafile=" + c.CAFile + "\n")

	sh.WriteString(header("#", "login shells"))
	for _, kv := range c.env() {
		k, v, _ := strings.Cut(kv, "=")
		sh.WriteString("export " + k + "=" + shellQuote(v) + "\n")
	}

	return []clientFile{
		{Name: "pip.conf", Destination: pipConfPath, Body: []byte(pip.String())},
		{Name: "gitconfig", Destination: gitConfigPath, Body: []byte(git.String())},
		{Name: "npmrc", Destination: npmrcPath, Body: []byte(npm.String())},
		{Name: "profile.sh", Destination: profileDPath, Body: []byte(sh.String())},
	}
}

// shellQuote single-quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeClientConf writes c's files into dir (the sandbox's directory on the host) and
// returns their read-only mounts. Every file is written before any mount is returned;
// on an error none is.
func writeClientConf(dir string, c clientConf) ([]runtime.Mount, error) {
	var mounts []runtime.Mount
	for _, f := range c.files() {
		path := filepath.Join(dir, f.Name)
		if err := writeConfFile(path, f.Body); err != nil {
			return nil, err
		}
		mounts = append(mounts, runtime.Mount{Source: path, Destination: f.Destination, ReadOnly: true})
	}
	return mounts, nil
}

// writeConfFile makes path hold body. A new file is written aside and renamed into
// place, so it is never seen half-written. An existing file with other content (a
// running sandbox reattached after a restart of the daemon, whose proxy port may have
// changed) is rewritten in place: a running sandbox's bind mount holds the file's
// inode, which a rename would leave behind. A file that already holds body is left
// alone.
func writeConfFile(path string, body []byte) error {
	old, err := os.ReadFile(path)
	switch {
	case err == nil && bytes.Equal(old, body):
		return nil
	case err == nil:
		return os.WriteFile(path, body, 0o644)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return durable.WriteFile(path, body, 0o644)
}
