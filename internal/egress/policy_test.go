package egress

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
)

func TestParseRule(t *testing.T) {
	tests := []struct {
		in   string
		want Rule
	}{
		{"api.example.com", Rule{Host: "api.example.com"}},
		{"API.Example.COM.", Rule{Host: "api.example.com"}},
		{"api.example.com:443/GET,POST", Rule{Host: "api.example.com", Ports: []int{443}, Methods: []string{"GET", "POST"}}},
		{"api.example.com/get,head,get", Rule{Host: "api.example.com", Methods: []string{"GET", "HEAD"}}},
		{"*.corp.dev", Rule{Host: "*.corp.dev"}},
		{"*.corp.dev:8443", Rule{Host: "*.corp.dev", Ports: []int{8443}}},
		{"git.example.com:22,443", Rule{Host: "git.example.com", Ports: []int{22, 443}}},
		{"10.0.0.5:5432", Rule{Host: "10.0.0.5", Ports: []int{5432}}},
		{"[2001:db8::1]:443/GET", Rule{Host: "2001:db8::1", Ports: []int{443}, Methods: []string{"GET"}}},
		{"[2001:DB8::1]", Rule{Host: "2001:db8::1"}},
		{"under_score.example.com", Rule{Host: "under_score.example.com"}},
		{"10.1.0.0/16", Rule{Host: "10.1.0.0/16"}},
		{"10.1.0.0/16:5432,6379", Rule{Host: "10.1.0.0/16", Ports: []int{5432, 6379}}},
		{"10.1.2.0/24:8080/GET", Rule{Host: "10.1.2.0/24", Ports: []int{8080}, Methods: []string{"GET"}}},
		{"10.1.2.3/32/post", Rule{Host: "10.1.2.3/32", Methods: []string{"POST"}}},
		{"[2001:DB8::/32]:443", Rule{Host: "2001:db8::/32", Ports: []int{443}}},
		{"[2001:db8::/48]", Rule{Host: "2001:db8::/48"}},
	}
	for _, tt := range tests {
		got, err := ParseRule(tt.in)
		if err != nil {
			t.Errorf("ParseRule(%q) error: %v", tt.in, err)
			continue
		}
		if !ruleEqual(got, tt.want) {
			t.Errorf("ParseRule(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
		if back, err := ParseRule(got.String()); err != nil || !ruleEqual(back, got) {
			t.Errorf("ParseRule(%q).String() = %q does not read back (%+v, %v)", tt.in, got.String(), back, err)
		}
	}
}

func TestParseRuleErrors(t *testing.T) {
	tests := []struct{ in, wantMsg string }{
		{"", "empty host"},
		{":443", "empty host"},
		{"api.example.com:", "empty port"},
		{"api.example.com:0", "from 1 to 65535"},
		{"api.example.com:65536", "from 1 to 65535"},
		{"api.example.com:https", "from 1 to 65535"},
		{"api.example.com/", "no method"},
		{"api.example.com/FETCH", "not one of GET"},
		{"api.example.com/CONNECT", "not one of GET"},
		{"2001:db8::1", "in brackets"},
		{"[2001:db8::1", "missing ]"},
		{"[2001:db8::1]443", "expected :PORT"},
		{"[example.com]", "not an IPv6"},
		{"*.com", "too wide"},
		{"*", "character"},
		{"a.*.com", "character"},
		{"exa mple.com", "character"},
		{"-bad.example.com", "starts or ends"},
		{"bücher.de", "punycode"},
		{"0x7f.1", "standard dotted"},
		{"2130706433", "standard dotted"},
		{"256.1.1.1", "looks like an IP address"},
		{"a..b", "empty or too long label"},
		{"10.1.0.1/16", "host bits set"},
		{"10.1.0.0/33", "from 0 to 32"},
		{"0.0.0.0/0:22", "every address"},
		{"example.com/16", "needs an IP address"},
		{"[2001:db8::/]", "prefix length"},
		{"[2001:db8::/129]", "from 0 to 128"},
		{strings.Repeat("a", 64) + ".com", "empty or too long label"},
	}
	for _, tt := range tests {
		_, err := ParseRule(tt.in)
		if err == nil {
			t.Errorf("ParseRule(%q) = nil error, want one saying %q", tt.in, tt.wantMsg)
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParseRule(%q) error %v is not invalid argument", tt.in, err)
		}
		if msg := err.Error(); !strings.Contains(msg, tt.wantMsg) || !strings.Contains(msg, "HOST[:PORT][/METHODS]") {
			t.Errorf("ParseRule(%q) error %q, want it to say %q and the accepted form", tt.in, msg, tt.wantMsg)
		}
	}
}

func TestValidate(t *testing.T) {
	rule := Rule{Host: "api.example.com", Ports: []int{443}}
	tests := []struct {
		name    string
		p       Policy
		wantMsg string // "" means valid
	}{
		{"default", Policy{Mode: ModeBaseline}, ""},
		{"every mode", Policy{Mode: ModeUnrestricted}, ""},
		{"allowlist with rules", Policy{Mode: ModeAllowlist, Rules: []Rule{rule}}, ""},
		{"private ranges", Policy{Mode: ModeAllowlist, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, ""},
		{"empty mode", Policy{}, "is not one of"},
		{"unknown mode", Policy{Mode: "open"}, "is not one of"},
		{"rules outside allowlist", Policy{Mode: ModeBaseline, Rules: []Rule{rule}}, "only to mode allowlist"},
		{"bad rule host", Policy{Mode: ModeAllowlist, Rules: []Rule{{Host: "a b"}}}, "character"},
		{"non-canonical rule", Policy{Mode: ModeAllowlist, Rules: []Rule{{Host: "API.example.com"}}}, "canonical"},
		{"bad port", Policy{Mode: ModeAllowlist, Rules: []Rule{{Host: "a.com", Ports: []int{70000}}}}, "65535"},
		{"bad method", Policy{Mode: ModeAllowlist, Rules: []Rule{{Host: "a.com", Methods: []string{"BREW"}}}}, "BREW"},
		{"host bits", Policy{Mode: ModeBaseline, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/8")}}, "host bits"},
		{"everything", Policy{Mode: ModeBaseline, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}, "every address"},
		{"invalid prefix", Policy{Mode: ModeBaseline, AllowPrivate: []netip.Prefix{{}}}, "invalid prefix"},
	}
	for _, tt := range tests {
		err := tt.p.Validate()
		switch {
		case tt.wantMsg == "" && err != nil:
			t.Errorf("%s: Validate() = %v, want nil", tt.name, err)
		case tt.wantMsg != "" && (err == nil || !strings.Contains(err.Error(), tt.wantMsg)):
			t.Errorf("%s: Validate() = %v, want an error saying %q", tt.name, err, tt.wantMsg)
		case err != nil && !errors.Is(err, errdefs.ErrInvalidArgument):
			t.Errorf("%s: Validate() error %v is not invalid argument", tt.name, err)
		}
	}
}

func TestDecide(t *testing.T) {
	rules := []Rule{
		mustRule(t, "api.example.com:443/GET,POST"),
		mustRule(t, "*.corp.dev"),
		mustRule(t, "pypi.org:443/POST"),
		mustRule(t, "10.0.0.5:5432"),
	}
	policies := map[Mode]Policy{
		ModeNone:         {Mode: ModeNone},
		ModeDenyAll:      {Mode: ModeDenyAll},
		ModeBaseline:     {Mode: ModeBaseline},
		ModeAllowlist:    {Mode: ModeAllowlist, Rules: rules},
		ModeUnrestricted: {Mode: ModeUnrestricted},
	}
	type want struct{ none, deny, baseline, allowlist, unrestricted bool }
	tests := []struct {
		host   string
		port   int
		method string
		want   want
	}{
		{"pypi.org", 443, "GET", want{false, false, true, true, true}},
		{"PyPI.org.", 443, "HEAD", want{false, false, true, true, true}},
		{"pypi.org", 80, "GET", want{false, false, true, true, true}},
		{"pypi.org", 443, "POST", want{false, false, false, true, true}}, // the allowlist adds POST
		{"pypi.org", 80, "POST", want{false, false, false, false, true}},
		{"pypi.org", 8443, "GET", want{false, false, false, false, true}},
		{"pypi.org", 0, "", want{false, false, true, true, true}},
		{"files.pythonhosted.org", 443, "GET", want{false, false, true, true, true}},
		{"registry.npmjs.org", 443, "GET", want{false, false, true, true, true}},
		{"proxy.golang.org", 443, "GET", want{false, false, true, true, true}},
		{"sum.golang.org", 443, "HEAD", want{false, false, true, true, true}},
		{"deb.debian.org", 80, "GET", want{false, false, true, true, true}},
		{"security.debian.org", 80, "GET", want{false, false, true, true, true}},
		{"archive.ubuntu.com", 80, "GET", want{false, false, true, true, true}},
		{"us.archive.ubuntu.com", 80, "GET", want{false, false, true, true, true}},
		{"security.ubuntu.com", 443, "PUT", want{false, false, false, false, true}},
		{"evilarchive.ubuntu.com", 80, "GET", want{false, false, false, false, true}},
		{"api.example.com", 443, "POST", want{false, false, false, true, true}},
		{"api.example.com", 443, "DELETE", want{false, false, false, false, true}},
		{"api.example.com", 80, "GET", want{false, false, false, false, true}},
		{"api.example.com", 443, "", want{false, false, false, true, true}},
		{"x.api.example.com", 443, "GET", want{false, false, false, false, true}},
		{"git.corp.dev", 443, "DELETE", want{false, false, false, true, true}},
		{"a.b.corp.dev", 80, "PATCH", want{false, false, false, true, true}},
		{"corp.dev", 443, "GET", want{false, false, false, false, true}},
		{"10.0.0.5", 5432, "", want{false, false, false, true, true}},
		{"0xa.0.0.5", 5432, "", want{false, false, false, true, true}},
		{"10.0.0.5", 443, "GET", want{false, false, false, false, true}},
		{"example.org", 443, "GET", want{false, false, false, false, true}},
		{"256.1.1.1", 443, "GET", want{false, false, false, false, false}},
		{"", 443, "GET", want{false, false, false, false, false}},
		{"exa mple.org", 443, "GET", want{false, false, false, false, false}},
	}
	for _, tt := range tests {
		wants := map[Mode]bool{ModeNone: tt.want.none, ModeDenyAll: tt.want.deny, ModeBaseline: tt.want.baseline,
			ModeAllowlist: tt.want.allowlist, ModeUnrestricted: tt.want.unrestricted}
		for _, mode := range modes {
			d := policies[mode].Decide(tt.host, tt.port, tt.method)
			if d.Allowed != wants[mode] {
				t.Errorf("%s: Decide(%q, %d, %q) = %+v, want allowed=%v", mode, tt.host, tt.port, tt.method, d, wants[mode])
			}
			if d.Allowed && d.Rule == "" || !d.Allowed && d.Reason == "" {
				t.Errorf("%s: Decide(%q, %d, %q) = %+v: a decision needs a rule or a reason", mode, tt.host, tt.port, tt.method, d)
			}
		}
	}
}

func TestDecideReasons(t *testing.T) {
	p := Policy{Mode: ModeAllowlist, Rules: []Rule{mustRule(t, "api.example.com:443/GET")}}
	tests := []struct {
		host   string
		port   int
		method string
		want   string
	}{
		{"pypi.org", 443, "GET", "baseline:pypi.org/GET,HEAD"},
		{"api.example.com", 443, "GET", "api.example.com:443/GET"},
		{"pypi.org", 443, "POST", "method POST is not allowed for pypi.org by baseline:pypi.org/GET,HEAD (allowed: GET, HEAD)"},
		{"api.example.com", 80, "GET", "port 80 is not allowed for api.example.com (allowed: 443)"},
		{"other.example.com", 443, "GET", "host other.example.com is not in the allowlist"},
	}
	for _, tt := range tests {
		d := p.Decide(tt.host, tt.port, tt.method)
		got := d.Reason
		if d.Allowed {
			got = d.Rule
		}
		if got != tt.want {
			t.Errorf("Decide(%q, %d, %q) = %q, want %q", tt.host, tt.port, tt.method, got, tt.want)
		}
	}
	if got := (Policy{Mode: ModeDenyAll}).Decide("pypi.org", 443, "GET").Reason; !strings.Contains(got, "deny_all") {
		t.Errorf("deny_all reason = %q, want it to name the mode", got)
	}
}

func TestBaselineRules(t *testing.T) {
	var hosts []string
	for _, r := range baselineRules {
		hosts = append(hosts, r.Host)
		if !slices.Equal(r.Methods, []string{"GET", "HEAD"}) {
			t.Errorf("baseline rule %s allows %v, want GET and HEAD only", r, r.Methods)
		}
	}
	for _, h := range []string{"pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "proxy.golang.org",
		"sum.golang.org", "deb.debian.org", "security.debian.org", "archive.ubuntu.com", "security.ubuntu.com",
		"*.archive.ubuntu.com"} {
		if !slices.Contains(hosts, h) {
			t.Errorf("baseline lacks %s", h)
		}
	}
}

func mustRule(t testing.TB, s string) Rule {
	t.Helper()
	r, err := ParseRule(s)
	if err != nil {
		t.Fatalf("ParseRule(%q): %v", s, err)
	}
	return r
}

func TestDecideTCP(t *testing.T) {
	allow := Policy{Mode: ModeAllowlist, Rules: mustRules(t, "10.1.0.0/16:5432", "10.2.0.0/24", "10.3.0.7:6379",
		"10.4.0.0/16:8080/GET", "api.example.com:5432", "[2001:db8::/32]:22")}
	tests := []struct {
		pol  Policy
		addr string
		port int
		want bool
		rule string
	}{
		{allow, "10.1.9.9", 5432, true, "10.1.0.0/16:5432"},
		{allow, "10.1.9.9", 5433, false, ""},
		{allow, "10.2.0.200", 1, true, "10.2.0.0/24"},
		{allow, "10.2.0.200", 65535, true, "10.2.0.0/24"},
		{allow, "10.2.1.1", 22, false, ""},
		{allow, "10.3.0.7", 6379, true, "10.3.0.7:6379"},
		{allow, "10.3.0.7", 22, false, ""},
		{allow, "10.4.0.1", 8080, false, ""},        // methods cannot be enforced on plain TCP
		{allow, "::ffff:10.1.0.1", 5432, false, ""}, // the relay unmaps; a mapped form matches no IPv4 rule
		{allow, "api.example.com", 5432, true, "api.example.com:5432"},
		{allow, "API.example.com.", 5432, true, "api.example.com:5432"},
		{allow, "api.example.com", 443, false, ""},
		{allow, "2001:db8:1::5", 22, true, "[2001:db8::/32]:22"},
		{allow, "2001:db9::5", 22, false, ""},
		{Policy{Mode: ModeUnrestricted}, "93.184.216.34", 22, true, "unrestricted"},
		{Policy{Mode: ModeBaseline}, "10.1.0.1", 5432, false, ""},
		{Policy{Mode: ModeDenyAll}, "10.1.0.1", 5432, false, ""},
		{Policy{Mode: ModeNone}, "10.1.0.1", 5432, false, ""},
	}
	for _, tt := range tests {
		d := tt.pol.DecideTCP(tt.addr, tt.port)
		if d.Allowed != tt.want || d.Rule != tt.rule {
			t.Errorf("%s DecideTCP(%s, %d) = %+v, want allowed=%v rule=%q", tt.pol.Mode, tt.addr, tt.port, d, tt.want, tt.rule)
		}
		if !d.Allowed && d.Reason == "" {
			t.Errorf("%s DecideTCP(%s, %d) refused without a reason", tt.pol.Mode, tt.addr, tt.port)
		}
	}
	if d := allow.DecideTCP("10.9.9.9", 5432); !strings.Contains(d.Reason, "10.9.9.9/32:5432") {
		t.Errorf("refusal %q does not suggest a rule", d.Reason)
	}
	// Prefix rules decide HTTP to address literals too, on every port unless they name some.
	if d := allow.Decide("10.2.0.9", 8443, "POST"); !d.Allowed {
		t.Errorf("Decide on a prefix rule's address refused: %s", d.Reason)
	}
	if d := allow.Decide("10.4.3.2", 8080, "POST"); d.Allowed {
		t.Errorf("Decide allowed POST under a GET-only prefix rule")
	}
}
