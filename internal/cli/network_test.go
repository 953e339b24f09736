package cli

import (
	"strings"
	"testing"
)

// TestNetworkSetSaysWhatItDrops: a change to deny_all names the allow rules it drops.
func TestNetworkSetSaysWhatItDrops(t *testing.T) {
	n := newNode(t)
	n.must(t, "create", "netbox", "--network", "allowlist", "--allow", "pypi.org", "--allow", "api.example.com:443")
	out, errOut, err := n.run(bg, "", "network", "set", "netbox", "--network", "deny_all")
	wantExit(t, err, 0)
	wantContains(t, "network set stderr", errOut, "dropped allow rules: pypi.org, api.example.com:443", "deny_all allows no outbound connections")
	if strings.Contains(out, "dropped") {
		t.Errorf("the note is on stdout: %q", out)
	}
	// Nothing dropped, nothing said.
	_, errOut, err = n.run(bg, "", "network", "set", "netbox", "--network", "allowlist", "--allow", "pypi.org")
	wantExit(t, err, 0)
	if strings.Contains(errOut, "dropped") {
		t.Errorf("a change that drops nothing says %q", errOut)
	}
}

// TestAllowKeepsCommasInARule: a comma inside one --allow separates ports or methods of
// that rule (the README's 'api.example.com/GET,POST'); it never starts a second rule.
func TestAllowKeepsCommasInARule(t *testing.T) {
	n := newNode(t)
	n.must(t, "create", "commas", "--network", "allowlist", "--allow", "api.example.com/GET,POST",
		"--allow", "db.example.com:5432,6379", "--allow", "*.githubusercontent.com")
	out := n.must(t, "network", "get", "commas")
	wantContains(t, "network get", out, "api.example.com/GET,POST db.example.com:5432,6379 *.githubusercontent.com")
	if strings.Contains(out, "post") {
		t.Errorf("the methods became a host of their own: %q", out)
	}
	// Two hosts in one --allow are refused, saying how to write them.
	_, errOut, err := n.run(bg, "", "create", "twohosts", "--allow", "a.example.com,b.example.com")
	wantExit(t, err, 1)
	wantContains(t, "two hosts in one rule", errOut, "a.example.com,b.example.com", "one rule per host")
}
