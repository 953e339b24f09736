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
