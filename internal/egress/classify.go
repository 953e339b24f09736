package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// Class is what kind of destination an address is.
type Class int

const (
	// Public addresses are reachable in every mode that allows the host.
	Public Class = iota
	// Private addresses (loopback, RFC 1918, link-local, CGNAT, ULA, the node's own, …)
	// are reachable only inside a policy's AllowPrivate prefixes.
	Private
	// Metadata addresses (cloud instance metadata services) are reachable only when
	// AllowPrivate names exactly that one address.
	Metadata
	// Unroutable addresses (unspecified, multicast, broadcast, reserved, documentation,
	// IPv4-mapped and other forms that only exist to dodge checks) are never reachable.
	Unroutable
)

func (c Class) String() string {
	switch c {
	case Public:
		return "public"
	case Private:
		return "private"
	case Metadata:
		return "metadata"
	case Unroutable:
		return "unroutable"
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

type protectedRange struct {
	prefix netip.Prefix
	class  Class
	why    string
}

func r(p string, c Class, why string) protectedRange {
	return protectedRange{netip.MustParsePrefix(p), c, why}
}

// The fixed protected ranges; the first that contains an address classifies it, so the
// more specific ones come first.
var (
	ranges4 = []protectedRange{
		r("169.254.169.254/32", Metadata, "cloud metadata service"),
		r("169.254.170.2/32", Metadata, "container metadata service"),
		r("100.100.100.200/32", Metadata, "cloud metadata service"),
		r("0.0.0.0/8", Unroutable, `"this network" (0.0.0.0/8)`),
		r("10.0.0.0/8", Private, "private network (RFC 1918)"),
		r("100.64.0.0/10", Private, "carrier-grade NAT (100.64.0.0/10)"),
		r("127.0.0.0/8", Private, "loopback"),
		r("169.254.0.0/16", Private, "link-local"),
		r("172.16.0.0/12", Private, "private network (RFC 1918)"),
		r("192.0.0.0/24", Private, "IETF protocol assignments (192.0.0.0/24)"),
		r("192.0.2.0/24", Unroutable, "documentation (192.0.2.0/24)"),
		r("192.88.99.0/24", Unroutable, "6to4 relay anycast (192.88.99.0/24)"),
		r("192.168.0.0/16", Private, "private network (RFC 1918)"),
		r("198.18.0.0/15", Private, "benchmarking (198.18.0.0/15)"),
		r("198.51.100.0/24", Unroutable, "documentation (198.51.100.0/24)"),
		r("203.0.113.0/24", Unroutable, "documentation (203.0.113.0/24)"),
		r("224.0.0.0/4", Unroutable, "multicast"),
		r("255.255.255.255/32", Unroutable, "broadcast"),
		r("240.0.0.0/4", Unroutable, "reserved (240.0.0.0/4)"),
	}
	ranges6 = []protectedRange{
		r("fd00:ec2::254/128", Metadata, "cloud metadata service"),
		r("::/128", Unroutable, "unspecified"),
		r("::1/128", Private, "loopback"),
		r("64:ff9b:1::/48", Private, "local-use NAT64 (64:ff9b:1::/48)"),
		r("100::/64", Unroutable, "discard-only (100::/64)"),
		r("2001:2::/48", Private, "benchmarking (2001:2::/48)"),
		r("2001:10::/28", Unroutable, "ORCHID (2001:10::/28)"),
		r("2001:20::/28", Unroutable, "ORCHIDv2 (2001:20::/28)"),
		r("2001:db8::/32", Unroutable, "documentation (2001:db8::/32)"),
		r("3fff::/20", Unroutable, "documentation (3fff::/20)"),
		r("fc00::/7", Private, "unique local (fc00::/7)"),
		r("fe80::/10", Private, "link-local"),
		r("fec0::/10", Private, "site-local (fec0::/10)"),
		r("ff00::/8", Unroutable, "multicast"),
	}
	mapped4    = netip.MustParsePrefix("::ffff:0:0/96")
	compat4    = netip.MustParsePrefix("::/96")
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour  = netip.MustParsePrefix("2002::/16")
	teredo     = netip.MustParsePrefix("2001::/32")
	global6    = netip.MustParsePrefix("2000::/3")
	loopback6  = netip.IPv6Loopback()
	publicDesc = "public"
)

// Classify says what kind of destination ip is and why, from the fixed ranges alone
// (Guard adds the node's own addresses). A zone is ignored. IPv6 forms that carry an
// IPv4 address (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo) are classified by the
// address they carry when that one is protected.
func Classify(ip netip.Addr) (Class, string) {
	if !ip.IsValid() {
		return Unroutable, "invalid address"
	}
	ip = ip.WithZone("")
	if ip.Is4() {
		return classifyIn(ip, ranges4)
	}
	b := ip.As16()
	switch {
	case mapped4.Contains(ip):
		return embedded("IPv4-mapped", ip.Unmap(), Unroutable, "IPv4-mapped IPv6 address; use the IPv4 form")
	case compat4.Contains(ip) && ip.Compare(loopback6) > 0:
		v4 := netip.AddrFrom4([4]byte(b[12:16]))
		return embedded("IPv4-compatible", v4, Unroutable, "IPv4-compatible IPv6 address (deprecated)")
	case nat64.Contains(ip):
		return embedded("NAT64", netip.AddrFrom4([4]byte(b[12:16])), Public, publicDesc)
	case sixToFour.Contains(ip):
		return embedded("6to4", netip.AddrFrom4([4]byte(b[2:6])), Public, publicDesc)
	case teredo.Contains(ip):
		if c, why := embedded("Teredo server", netip.AddrFrom4([4]byte(b[4:8])), Public, publicDesc); c != Public {
			return c, why
		}
		client := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
		return embedded("Teredo client", netip.AddrFrom4(client), Public, publicDesc)
	}
	if c, why := classifyIn(ip, ranges6); c != Public {
		return c, why
	}
	if !global6.Contains(ip) {
		return Unroutable, "outside IPv6 global unicast (2000::/3)"
	}
	return Public, publicDesc
}

func classifyIn(ip netip.Addr, ranges []protectedRange) (Class, string) {
	for _, pr := range ranges {
		if pr.prefix.Contains(ip) {
			return pr.class, pr.why
		}
	}
	return Public, publicDesc
}

// embedded classifies an IPv6 form by the IPv4 address v4 it carries: that address's
// class when it is protected, otherwise the given fallback.
func embedded(form string, v4 netip.Addr, fallback Class, why string) (Class, string) {
	if c, inner := classifyIn(v4, ranges4); c != Public {
		return c, fmt.Sprintf("%s address of %s: %s", form, v4, inner)
	}
	return fallback, why
}

// Guard decides whether an address may be dialled: Classify, plus the node's own
// addresses, plus the private prefixes a policy authorises.
type Guard struct {
	// Node lists the node's own addresses (as /32 and /128 prefixes, or wider); they
	// are Private whatever range they are in.
	Node []netip.Prefix
	// Sandboxes is the subnet sandbox links are carved from: Unroutable, since no
	// policy lets one sandbox reach another (or the node through its link).
	Sandboxes []netip.Prefix
}

// Classify is the package Classify with the node's own addresses added as Private.
func (g Guard) Classify(ip netip.Addr) (Class, string) {
	c, why := Classify(ip)
	if c == Metadata || c == Unroutable {
		return c, why
	}
	for _, p := range g.Sandboxes {
		if p.Contains(ip.WithZone("")) {
			return Unroutable, "a sandbox link address (sandboxes cannot reach each other)"
		}
	}
	for _, p := range g.Node {
		if p.Contains(ip.WithZone("")) {
			return Private, "the node's own address"
		}
	}
	return c, why
}

// Check returns nil if ip may be dialled under allow (a policy's AllowPrivate): a Public
// address always, a Private one inside an allowed prefix, a Metadata one only when a
// prefix names exactly it, an Unroutable one never. The error is permission denied.
func (g Guard) Check(ip netip.Addr, allow []netip.Prefix) error {
	c, why := g.Classify(ip)
	ip = ip.WithZone("")
	switch c {
	case Public:
		return nil
	case Private:
		if slices.ContainsFunc(allow, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			return nil
		}
	case Metadata:
		if slices.ContainsFunc(allow, func(p netip.Prefix) bool { return p.IsSingleIP() && p.Addr() == ip }) {
			return nil
		}
	}
	return denied("destination %s is protected: %s", ip, why)
}

// denied is a client-facing permission-denied error.
func denied(format string, args ...any) *errdefs.Error {
	return &errdefs.Error{Class: errdefs.ErrPermissionDenied, Msg: fmt.Sprintf(format, args...)}
}

// ParseHostLiteral recognises an IP address written in any form a resolver or URL
// parser would accept, so none can dodge the address check: dotted decimal, the
// inet_aton forms (2130706433, 0177.0.0.1, 0x7f.0.0.1, 0x7f000001, 127.1, 10.1), a
// trailing dot, IPv6 with or without brackets, and zone ids (which it drops, also in
// their URL-escaped %25 form). ok is false when host is not an address.
func ParseHostLiteral(host string) (addr netip.Addr, ok bool) {
	h := host
	if inner, found := strings.CutPrefix(h, "["); found {
		if inner, found = strings.CutSuffix(inner, "]"); !found {
			return netip.Addr{}, false
		}
		h = inner
	}
	if strings.Contains(h, ":") || len(h) != len(host) {
		if i := strings.IndexByte(h, '%'); i >= 0 {
			h = h[:i] // the zone, raw or escaped as %25
		}
		a, err := netip.ParseAddr(h)
		if err != nil {
			return netip.Addr{}, false
		}
		return a, true
	}
	return parseInet4(strings.TrimSuffix(h, "."))
}

// parseInet4 parses the forms inet_aton and the URL standard accept: one to four parts,
// each decimal, octal (leading 0) or hex (0x); the last part fills the remaining bytes.
func parseInet4(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	for i, p := range parts {
		n, ok := parseInetPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if n > 255 {
				return netip.Addr{}, false
			}
			v |= n << (8 * (3 - i))
			continue
		}
		if n >= 1<<(8*(4-i)) {
			return netip.Addr{}, false
		}
		v |= n
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

func parseInetPart(p string) (uint64, bool) {
	base := 10
	switch {
	case p == "":
		return 0, false
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, p = 16, p[2:]
		if p == "" {
			return 0, true // "0x" alone is zero to inet_aton and the URL standard
		}
	case len(p) >= 2 && p[0] == '0':
		base, p = 8, p[1:]
	}
	n, err := strconv.ParseUint(p, base, 64)
	return n, err == nil
}
