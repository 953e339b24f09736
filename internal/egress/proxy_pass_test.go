package egress

import (
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"
)

// TestProxyPassesTLS: TLS to port 443 passes through untouched (the client sees the
// upstream's own certificate) only where nothing is enforced inside it: mode
// unrestricted, no secret delivered through the proxy. Anywhere else the proxy
// terminates it with the node CA. Either way the connection is recorded with its bytes.
func TestProxyPassesTLS(t *testing.T) {
	unrestricted := Policy{Mode: ModeUnrestricted, AllowPrivate: loopback8}
	secret := []Substitution{{Secret: "s", Placeholder: "AIRLOCK_PLACEHOLDER_s", Hosts: []string{"other.example.com"}}}
	tests := []struct {
		name   string
		sb     SandboxInfo
		passes bool
	}{
		{"unrestricted", SandboxInfo{Policy: unrestricted}, true},
		{"unrestricted with a secret bound", SandboxInfo{Policy: unrestricted, Secrets: secret}, false},
		{"allowlist rule without methods", SandboxInfo{Policy: Policy{Mode: ModeAllowlist, AllowPrivate: loopback8,
			Rules: mustRules(t, "pypi.org")}}, false},
		{"baseline", SandboxInfo{Policy: Policy{Mode: ModeBaseline, AllowPrivate: loopback8}}, false},
	}
	for _, tt := range tests {
		tt.sb.ID, tt.sb.Generation = "sb_pass", 1
		e := newTestEnv(t, tt.sb)
		roots := e.nodeCA.Pool()
		roots.AddCert(e.upCA.Certificate())
		for _, via := range []string{"CONNECT", "TLS"} {
			var conn net.Conn
			if via == "CONNECT" {
				_, conn = e.rawConnect(t, "pypi.org:443")
			} else {
				conn = e.transparent(t, netip.MustParseAddrPort("93.184.216.34:443"))
			}
			if conn == nil {
				t.Errorf("%s: %s to pypi.org:443 refused", tt.name, via)
				continue
			}
			tc := tls.Client(conn, &tls.Config{ServerName: "pypi.org", RootCAs: roots})
			if got := roundTrip(t, tc, "pypi.org"); got != 200 {
				t.Errorf("%s: GET over %s = %d, want 200", tt.name, via, got)
			}
			issuer := tc.ConnectionState().PeerCertificates[0].Issuer.CommonName
			if passed := issuer == e.upCA.Certificate().Subject.CommonName; passed != tt.passes {
				t.Errorf("%s: over %s the client saw a certificate from %q; passed through = %v, want %v", tt.name, via, issuer, passed, tt.passes)
			}
			tc.Close()
			e.waitRecord(tt.name+" "+via, func(r Record) bool {
				return r.Method == via && r.Host == "pypi.org" && r.Allowed && r.BytesDown > 1000 && r.BytesUp > 100
			})
		}
	}

	// A policy change cuts a connection that passes through: at its next request a
	// terminated tunnel would be decided again.
	e := newTestEnv(t, SandboxInfo{ID: "sb_pass", Generation: 1, Policy: unrestricted})
	_, conn := e.rawConnect(t, "pypi.org:443")
	tc := tls.Client(conn, &tls.Config{ServerName: "pypi.org", RootCAs: e.upCA.Pool()})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	e.setPolicy(Policy{Mode: ModeAllowlist, AllowPrivate: loopback8, Rules: mustRules(t, "pypi.org")})
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a passed-through connection after the policy stopped passing it: read %v, want it closed", err)
	}
	tc.Close()

	// Passing through checks the address all the same.
	e = newTestEnv(t, SandboxInfo{ID: "sb_pass", Generation: 1, Policy: Policy{Mode: ModeUnrestricted}})
	if code, conn := e.rawConnect(t, "pypi.org:443"); code != 403 || conn != nil {
		t.Errorf("CONNECT to a loopback address not authorised = %d, want 403", code)
	}
	conn = e.transparent(t, netip.MustParseAddrPort("93.184.216.34:443"))
	if err := tls.Client(conn, &tls.Config{ServerName: "meta.example", InsecureSkipVerify: true}).Handshake(); err == nil {
		t.Errorf("transparent TLS to a metadata address completed its handshake, want refused")
	}
}
