package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// Mode is a sandbox's egress mode.
type Mode string

// The egress modes, from the most closed to the most open.
const (
	ModeNone         Mode = "none"         // no interface but loopback
	ModeDenyAll      Mode = "deny_all"     // nothing through the proxy
	ModeBaseline     Mode = "baseline"     // the package registries, GET and HEAD only
	ModeAllowlist    Mode = "allowlist"    // baseline plus Rules
	ModeUnrestricted Mode = "unrestricted" // any public host
)

var modes = []Mode{ModeNone, ModeDenyAll, ModeBaseline, ModeAllowlist, ModeUnrestricted}

// Rule allows one host, every subdomain of a wildcard, or every address of a CIDR
// prefix, on some ports with some methods. A prefix rule is what lets a sandbox open
// plain TCP connections to ports other than 80 and 443 (see DecideTCP).
type Rule struct {
	Host    string   // "api.example.com", "*.example.com" (subdomains only), an IP address or a CIDR prefix "10.1.0.0/16"
	Ports   []int    // empty: 80 and 443 for a host or address, every port for a prefix
	Methods []string // upper case; empty: every method
}

// prefix returns the rule's CIDR prefix, if it is a prefix rule.
func (r Rule) prefix() (netip.Prefix, bool) {
	if !strings.Contains(r.Host, "/") {
		return netip.Prefix{}, false
	}
	pf, err := netip.ParsePrefix(r.Host)
	return pf, err == nil
}

// ports returns the ports the rule allows; nil means every port.
func (r Rule) ports() []int {
	if len(r.Ports) > 0 {
		return r.Ports
	}
	if _, ok := r.prefix(); ok {
		return nil
	}
	return defaultPorts
}

// Policy is a sandbox's egress policy.
type Policy struct {
	Mode  Mode
	Rules []Rule // only with ModeAllowlist
	// AllowPrivate authorises protected destinations inside these prefixes (see Guard.Check).
	AllowPrivate []netip.Prefix
}

// Decision is the outcome of Policy.Decide.
type Decision struct {
	Allowed bool
	Rule    string // what allowed it: "unrestricted", "baseline:pypi.org", "api.example.com:443/GET"
	Reason  string // why it was denied; empty when allowed
}

var (
	defaultPorts = []int{80, 443}
	knownMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
)

// baselineHosts are the package registries every baseline and allowlist sandbox reaches.
var baselineHosts = []string{
	"pypi.org", "files.pythonhosted.org", // PyPI
	"registry.npmjs.org",                 // npm
	"proxy.golang.org", "sum.golang.org", // the Go module proxy and checksum database
	"deb.debian.org", "security.debian.org", // Debian
	"archive.ubuntu.com", "security.ubuntu.com", "*.archive.ubuntu.com", // Ubuntu
}

var baselineRules = func() []Rule {
	rules := make([]Rule, len(baselineHosts))
	for i, h := range baselineHosts {
		rules[i] = Rule{Host: h, Methods: []string{"GET", "HEAD"}}
	}
	return rules
}()

const ruleForm = "the form is HOST[:PORT][/METHODS], e.g. api.example.com:443/GET,POST, *.corp.dev or 10.1.0.0/16:5432"

// ParseRule parses "HOST[:PORT][/METHODS]": a host name, a wildcard "*.example.com"
// (which matches subdomains, not example.com itself), an IP address or a CIDR prefix
// ("10.1.0.0/16", IPv6 ones in brackets: "[2001:db8::/32]"), an optional port (or
// comma-separated ports; default 80 and 443, and every port for a prefix), and
// optional comma-separated methods (default: every method).
func ParseRule(s string) (Rule, error) {
	bad := func(format string, args ...any) error {
		return errdefs.Invalid("egress rule %q: %s; %s", s, fmt.Sprintf(format, args...), ruleForm)
	}
	var r Rule
	rest, bits := s, ""
	if strings.HasPrefix(s, "[") {
		// "[2001:db8::/32]:443": the prefix length sits inside the brackets.
		if open, after, ok := strings.Cut(s, "/"); ok && !strings.Contains(open, "]") {
			n := strings.IndexByte(after, ']')
			if n <= 0 {
				return Rule{}, bad("missing prefix length or ] after the IPv6 prefix")
			}
			bits, rest = after[:n], open+after[n:]
		}
	} else if addr, after, ok := strings.Cut(s, "/"); ok && after != "" && after[0] >= '0' && after[0] <= '9' {
		// "10.1.0.0/16:5432/GET": the first / starts a prefix length, not methods.
		n := strings.IndexAny(after, ":/")
		if n < 0 {
			n = len(after)
		}
		bits, rest = after[:n], addr+after[n:]
	}
	hostport, methods, hasMethods := strings.Cut(rest, "/")
	if hasMethods {
		if methods == "" {
			return Rule{}, bad("no method after /")
		}
		for _, m := range strings.Split(methods, ",") {
			m = strings.ToUpper(m)
			if !slices.Contains(knownMethods, m) {
				return Rule{}, bad("method %q is not one of %s", m, strings.Join(knownMethods, ", "))
			}
			if !slices.Contains(r.Methods, m) {
				r.Methods = append(r.Methods, m)
			}
		}
	}
	host, ports := hostport, ""
	switch {
	case strings.HasPrefix(hostport, "["):
		end := strings.IndexByte(hostport, ']')
		if end < 0 {
			return Rule{}, bad("missing ] after the IPv6 address")
		}
		host = hostport[1:end]
		if rest := hostport[end+1:]; rest != "" {
			var ok bool
			if ports, ok = strings.CutPrefix(rest, ":"); !ok || ports == "" {
				return Rule{}, bad("expected :PORT after ]")
			}
		}
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() {
			return Rule{}, bad("%q in brackets is not an IPv6 address", host)
		}
	case strings.Count(hostport, ":") > 1:
		return Rule{}, bad("write an IPv6 address in brackets, e.g. [2001:db8::1]:443")
	case strings.Contains(hostport, ":"):
		host, ports, _ = strings.Cut(hostport, ":")
		if ports == "" {
			return Rule{}, bad("empty port after :")
		}
	}
	if strings.Contains(host, ",") {
		return Rule{}, bad("a comma separates the ports or the methods of one rule, not hosts: give one rule per host")
	}
	h, err := ruleHost(host)
	if err != nil {
		return Rule{}, bad("%s", err)
	}
	if bits != "" {
		a, err := netip.ParseAddr(h)
		if err != nil {
			return Rule{}, bad("a prefix length (/%s) needs an IP address before it, not %q", bits, host)
		}
		n, err := strconv.Atoi(bits)
		if err != nil || n < 0 || n > a.BitLen() {
			return Rule{}, bad("prefix length /%s is not a number from 0 to %d", bits, a.BitLen())
		}
		pf := netip.PrefixFrom(a, n)
		switch {
		case pf != pf.Masked():
			return Rule{}, bad("prefix %s has host bits set (the prefix is %s)", pf, pf.Masked())
		case n == 0:
			return Rule{}, bad("prefix %s would allow every address; use mode unrestricted for that", pf)
		}
		h = pf.String()
	}
	r.Host = h
	if ports != "" {
		for _, p := range strings.Split(ports, ",") {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				return Rule{}, bad("port %q is not a number from 1 to 65535", p)
			}
			if !slices.Contains(r.Ports, n) {
				r.Ports = append(r.Ports, n)
			}
		}
	}
	return r, nil
}

// ruleHost returns the canonical form of a rule's host, or why it is not one.
func ruleHost(host string) (string, error) {
	if host == "" {
		return "", fmt.Errorf("empty host")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", fmt.Errorf("an address with a zone (%s) cannot be a rule", host)
		}
		return a.String(), nil
	}
	if _, ok := ParseHostLiteral(host); ok {
		return "", fmt.Errorf("write the IP address %q in standard dotted or IPv6 form", host)
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if rest, ok := strings.CutPrefix(h, "*."); ok {
		if err := checkHostname(rest); err != nil {
			return "", err
		}
		if !strings.Contains(rest, ".") {
			return "", fmt.Errorf("wildcard %q is too wide: name at least two labels after the *", host)
		}
		return h, nil
	}
	return h, checkHostname(h)
}

// String renders r in the form ParseRule reads.
func (r Rule) String() string {
	var b strings.Builder
	host := r.Host
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
		host = "[" + host + "]"
	}
	if pf, ok := r.prefix(); ok && pf.Addr().Is6() {
		host = "[" + host + "]"
	}
	b.WriteString(host)
	for i, p := range r.Ports {
		if i == 0 {
			b.WriteByte(':')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(p))
	}
	if len(r.Methods) > 0 {
		b.WriteByte('/')
		b.WriteString(strings.Join(r.Methods, ","))
	}
	return b.String()
}

// Validate reports the first problem with p as an invalid-argument error.
func (p Policy) Validate() error {
	if !slices.Contains(modes, p.Mode) {
		return errdefs.Invalid("egress mode %q is not one of none, deny_all, baseline, allowlist, unrestricted", p.Mode)
	}
	if len(p.Rules) > 0 && p.Mode != ModeAllowlist {
		return errdefs.Invalid("egress rules apply only to mode allowlist (the mode is %s)", p.Mode)
	}
	for _, r := range p.Rules {
		back, err := ParseRule(r.String())
		if err != nil {
			return err
		}
		if !ruleEqual(back, r) {
			return errdefs.Invalid("egress rule %q is not in canonical form; write it as %q", r.String(), back.String())
		}
	}
	for _, pf := range p.AllowPrivate {
		switch {
		case !pf.IsValid():
			return errdefs.Invalid("allow_private has an invalid prefix")
		case pf != pf.Masked():
			return errdefs.Invalid("allow_private prefix %s has host bits set; did you mean %s?", pf, pf.Masked())
		case pf.Bits() == 0:
			return errdefs.Invalid("allow_private prefix %s would authorise every address; name the private ranges", pf)
		}
	}
	return nil
}

func ruleEqual(a, b Rule) bool {
	return a.Host == b.Host && slices.Equal(a.Ports, b.Ports) && slices.Equal(a.Methods, b.Methods)
}

// Decide says whether the policy lets a sandbox reach host on port with method. Port 0
// means any port and an empty method any method: Decide(host, 0, "") asks whether the
// host is reachable at all (for DNS), Decide(host, 443, "") whether a tunnel may open.
// It decides on names only; the address a name resolves to is the dialer's check.
func (p Policy) Decide(host string, port int, method string) Decision {
	h, err := canonicalHost(host)
	if err != nil {
		return Decision{Reason: err.Error()}
	}
	method = strings.ToUpper(method)
	switch p.Mode {
	case ModeUnrestricted:
		return Decision{Allowed: true, Rule: "unrestricted"}
	case ModeBaseline:
		return decideRules(h, port, method, "baseline", nil)
	case ModeAllowlist:
		return decideRules(h, port, method, "allowlist", p.Rules)
	case ModeNone, ModeDenyAll:
		return Decision{Reason: fmt.Sprintf("egress mode %s allows no outbound connections", p.Mode)}
	}
	return Decision{Reason: fmt.Sprintf("unknown egress mode %q", p.Mode)}
}

// DecideTCP says whether the policy lets a sandbox open a plain TCP connection to
// host:port, one that is not HTTP on port 80 or TLS on 443 and so has no method to
// decide on. host is an address, or a name the sandbox resolved the address from.
// Mode unrestricted allows it; an allowlist allows it when a rule without methods
// (methods cannot be enforced on plain TCP) covers host and port. Whether the address
// is protected is the dialer's check.
func (p Policy) DecideTCP(host string, port int) Decision {
	h, err := canonicalHost(host)
	if err != nil {
		return Decision{Reason: err.Error()}
	}
	switch p.Mode {
	case ModeUnrestricted:
		return Decision{Allowed: true, Rule: "unrestricted"}
	case ModeAllowlist:
		for _, r := range p.Rules {
			if len(r.Methods) > 0 || !matchHost(r.Host, h) {
				continue
			}
			if ports := r.ports(); ports == nil || slices.Contains(ports, port) {
				return Decision{Allowed: true, Rule: r.String()}
			}
		}
		hint := Rule{Host: h, Ports: []int{port}}
		if a, err := netip.ParseAddr(h); err == nil {
			hint.Host = netip.PrefixFrom(a, a.BitLen()).String()
		}
		return Decision{Reason: fmt.Sprintf("no rule without methods allows TCP to %s port %d (add one, e.g. %s)", h, port, hint)}
	case ModeBaseline:
		return Decision{Reason: "egress mode baseline allows only HTTP and HTTPS to the package registries; use mode allowlist with a rule such as HOST:PORT for other TCP"}
	case ModeNone, ModeDenyAll:
		return Decision{Reason: fmt.Sprintf("egress mode %s allows no outbound connections", p.Mode)}
	}
	return Decision{Reason: fmt.Sprintf("unknown egress mode %q", p.Mode)}
}

func decideRules(host string, port int, method, list string, rules []Rule) Decision {
	var hostMatched, portMatched []Rule
	var labels []string
	for i, r := range slices.Concat(baselineRules, rules) {
		if !matchHost(r.Host, host) {
			continue
		}
		hostMatched = append(hostMatched, r)
		ports := r.ports()
		if port != 0 && ports != nil && !slices.Contains(ports, port) {
			continue
		}
		portMatched = append(portMatched, r)
		label := r.String()
		if i < len(baselineRules) {
			label = "baseline:" + label
		}
		labels = append(labels, label)
		if method == "" || len(r.Methods) == 0 || slices.Contains(r.Methods, method) {
			return Decision{Allowed: true, Rule: label}
		}
	}
	switch {
	case len(hostMatched) == 0:
		return Decision{Reason: fmt.Sprintf("host %s is not in the %s", host, list)}
	case len(portMatched) == 0:
		var ports []string
		for _, r := range hostMatched {
			for _, p := range r.ports() {
				ports = append(ports, strconv.Itoa(p))
			}
		}
		return Decision{Reason: fmt.Sprintf("port %d is not allowed for %s (allowed: %s)", port, host, strings.Join(ports, ", "))}
	}
	var methods []string
	for _, r := range portMatched {
		methods = append(methods, r.Methods...)
	}
	return Decision{Reason: fmt.Sprintf("method %s is not allowed for %s by %s (allowed: %s)",
		method, host, strings.Join(labels, ", "), strings.Join(methods, ", "))}
}

// matchHost reports whether a canonical host matches a rule's host: equal, a
// subdomain of a wildcard's base, or an address inside a prefix.
func matchHost(pattern, host string) bool {
	if strings.Contains(pattern, "/") {
		pf, err := netip.ParsePrefix(pattern)
		a, aerr := netip.ParseAddr(host)
		return err == nil && aerr == nil && pf.Contains(a)
	}
	if base, ok := strings.CutPrefix(pattern, "*"); ok {
		return len(host) > len(base) && strings.HasSuffix(host, base)
	}
	return pattern == host
}

// canonicalHost returns the form of a request's host that policy decides on: an IP
// literal in any encoding becomes its standard form, a name is lower-cased without a
// trailing dot. A name that is not a valid DNS name, or that ends in a number without
// being an address, is refused.
func canonicalHost(host string) (string, error) {
	if host == "" {
		return "", fmt.Errorf("empty host")
	}
	if a, ok := ParseHostLiteral(host); ok {
		return a.String(), nil
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if err := checkHostname(h); err != nil {
		return "", err
	}
	return h, nil
}

// checkHostname reports why h (lower case, no trailing dot) is not a valid DNS name.
func checkHostname(h string) error {
	if h == "" || len(h) > 253 {
		return fmt.Errorf("host name %q is empty or longer than 253 characters", h)
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return fmt.Errorf("host name %q has an empty or too long label", h)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("host name %q has a label that starts or ends with -", h)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("host name %q has the character %q (write other names in punycode)", h, c)
			}
		}
	}
	if endsInNumber(labels[len(labels)-1]) {
		return fmt.Errorf("host %q looks like an IP address but is not a valid one", h)
	}
	return nil
}

// endsInNumber is the URL standard's test: a last label of digits, or of 0x and hex
// digits, makes a host an IPv4 address or an error, never a name.
func endsInNumber(l string) bool {
	if rest, ok := strings.CutPrefix(l, "0x"); ok {
		return strings.Trim(rest, "0123456789abcdef") == ""
	}
	return strings.Trim(l, "0123456789") == ""
}
