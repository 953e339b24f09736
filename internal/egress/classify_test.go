package egress

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// TestClassifyAddr is the table of bypass forms: every way to write a protected
// address must parse as a literal and classify as protected.
func TestClassifyAddr(t *testing.T) {
	tests := []struct {
		host string
		want Class
	}{
		// Loopback in every IPv4 encoding.
		{"127.0.0.1", Private},
		{"2130706433", Private},
		{"017700000001", Private},
		{"0177.0.0.1", Private},
		{"0177.0.0.01", Private},
		{"0x7f.0.0.1", Private},
		{"0x7f000001", Private},
		{"0X7F.1", Private},
		{"0x7f.1", Private},
		{"127.1", Private},
		{"127.0.1", Private},
		{"127.000.000.001", Private},
		{"127.0.0.1.", Private},
		{"127.255.255.254", Private},
		// Other private ranges.
		{"10.1", Private},
		{"10.0.0.1", Private},
		{"012.0.0.1", Private},
		{"172.16.0.1", Private},
		{"172.31.255.255", Private},
		{"192.168.1.1", Private},
		{"0xc0a80101", Private},
		{"100.64.0.1", Private},
		{"100.127.255.255", Private},
		{"169.254.1.1", Private},
		{"198.18.0.1", Private},
		{"198.19.255.255", Private},
		{"192.0.0.8", Private},
		// Metadata in every encoding.
		{"169.254.169.254", Metadata},
		{"0xa9fea9fe", Metadata},
		{"2852039166", Metadata},
		{"0251.0376.0251.0376", Metadata},
		{"169.254.43518", Metadata},
		{"169.16689662", Metadata},
		{"100.100.100.200", Metadata},
		{"169.254.170.2", Metadata},
		{"[fd00:ec2::254]", Metadata},
		{"[::ffff:169.254.169.254]", Metadata},
		{"[2002:a9fe:a9fe::1]", Metadata},
		// Unroutable.
		{"0", Unroutable},
		{"0.0.0.0", Unroutable},
		{"0x0", Unroutable},
		{"0.1.2.3", Unroutable},
		{"224.0.0.1", Unroutable},
		{"239.255.255.250", Unroutable},
		{"255.255.255.255", Unroutable},
		{"4294967295", Unroutable},
		{"240.0.0.1", Unroutable},
		{"192.0.2.1", Unroutable},
		{"198.51.100.7", Unroutable},
		{"203.0.113.9", Unroutable},
		{"[::]", Unroutable},
		{"[ff02::1]", Unroutable},
		{"[2001:db8::1]", Unroutable},
		{"[3fff::1]", Unroutable},
		{"[100::1]", Unroutable},
		{"[4000::1]", Unroutable},
		{"[::ffff:8.8.8.8]", Unroutable},
		{"[::8.8.8.8]", Unroutable},
		// IPv6 loopback, link-local, ULA and site-local, with and without brackets and zones.
		{"[::1]", Private},
		{"::1", Private},
		{"[0:0:0:0:0:0:0:1]", Private},
		{"[fe80::1]", Private},
		{"[fe80::1%25eth0]", Private},
		{"[fe80::1%eth0]", Private},
		{"fe80::1%eth0", Private},
		{"[fd12:3456::1]", Private},
		{"[fc00::1]", Private},
		{"[fec0::1]", Private},
		// IPv6 forms that embed a protected IPv4 address.
		{"[::ffff:127.0.0.1]", Private},
		{"[::ffff:7f00:1]", Private},
		{"[0:0:0:0:0:ffff:7f00:1]", Private},
		{"[::ffff:10.0.0.1]", Private},
		{"[::127.0.0.1]", Private},
		{"[::7f00:1]", Private},
		{"[64:ff9b::127.0.0.1]", Private},
		{"[64:ff9b::a00:1]", Private},
		{"[64:ff9b:1::808:808]", Private},
		{"[2002:7f00:1::]", Private},
		{"[2002:c0a8:101::1]", Private},
		{"[2001:0:a00:1::]", Private},                       // Teredo server 10.0.0.1
		{"[2001:0:4136:e378:8000:63bf:80ff:fffe]", Private}, // Teredo client 127.0.0.1
		{"[2001:2::1]", Private},
		// Public.
		{"8.8.8.8", Public},
		{"1.1.1.1", Public},
		{"100.128.0.0", Public},
		{"172.32.0.0", Public},
		{"[2606:4700:4700::1111]", Public},
		{"[64:ff9b::8.8.8.8]", Public},
		{"[2002:808:808::1]", Public},
		{"[2001:0:4136:e378:8000:63bf:f7f7:f7f7]", Public}, // Teredo client 8.8.8.8
	}
	for _, tt := range tests {
		addr, ok := ParseHostLiteral(tt.host)
		if !ok {
			t.Errorf("ParseHostLiteral(%q) = not a literal, want an address", tt.host)
			continue
		}
		if got, why := Classify(addr); got != tt.want {
			t.Errorf("Classify(%q = %s) = %s (%s), want %s", tt.host, addr, got, why, tt.want)
		}
	}
}

func TestParseHostLiteral(t *testing.T) {
	tests := []struct {
		host string
		want string // "" means not a literal
	}{
		{"2130706433", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"10.1", "10.0.0.1"},
		{"1.2.65535", "1.2.255.255"},
		{"0x", "0.0.0.0"},
		{"[::1]", "::1"},
		{"[fe80::1%25eth0]", "fe80::1"},
		{"[1.2.3.4]", "1.2.3.4"},
		{"example.com", ""},
		{"127.0.0.1.example.com", ""},
		{"0x7g.1", ""},
		{"08.1", ""},
		{"256.1.1.1", ""},
		{"1.2.3.256", ""},
		{"1.2.65536", ""},
		{"1.2.3.4.5", ""},
		{"4294967296", ""},
		{"127..1", ""},
		{"", ""},
		{"[::1", ""},
		{"[example.com]", ""},
		{"-1", ""},
		{"+1", ""},
		{"1_0", ""},
	}
	for _, tt := range tests {
		addr, ok := ParseHostLiteral(tt.host)
		got := ""
		if ok {
			got = addr.String()
		}
		if got != tt.want {
			t.Errorf("ParseHostLiteral(%q) = %q, want %q", tt.host, got, tt.want)
		}
	}
}

func TestGuardCheck(t *testing.T) {
	g := Guard{Node: []netip.Prefix{netip.MustParsePrefix("203.0.114.7/32"), netip.MustParsePrefix("2a01:4f8::7/128")},
		Sandboxes: []netip.Prefix{netip.MustParsePrefix("10.203.0.0/16")}}
	pf := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, p := range s {
			out = append(out, netip.MustParsePrefix(p))
		}
		return out
	}
	tests := []struct {
		addr  string
		allow []netip.Prefix
		want  bool
	}{
		{"8.8.8.8", nil, true},
		{"127.0.0.1", nil, false},
		{"127.0.0.1", pf("127.0.0.0/8"), true},
		{"::1", pf("127.0.0.0/8"), false},
		{"::ffff:127.0.0.1", pf("127.0.0.0/8"), false},
		{"10.1.2.3", pf("10.1.0.0/16"), true},
		{"10.2.2.3", pf("10.1.0.0/16"), false},
		{"203.0.114.7", nil, false}, // the node's own address, public or not
		{"203.0.114.7", pf("203.0.114.7/32"), true},
		{"203.0.114.8", nil, true},
		{"2a01:4f8::7", nil, false},
		{"169.254.169.254", pf("169.254.0.0/16"), false}, // metadata needs its own /32
		{"169.254.169.254", pf("169.254.169.254/32"), true},
		{"169.254.1.1", pf("169.254.0.0/16"), true},
		{"0.0.0.0", pf("0.0.0.0/8"), false},
		{"224.0.0.1", pf("224.0.0.0/4"), false},
		{"10.203.0.6", nil, false},
		{"10.203.0.6", pf("10.0.0.0/8"), false}, // another sandbox, whatever is authorised
		{"10.203.0.6", pf("10.203.0.6/32"), false},
		{"10.204.0.6", pf("10.0.0.0/8"), true},
	}
	for _, tt := range tests {
		err := g.Check(netip.MustParseAddr(tt.addr), tt.allow)
		if got := err == nil; got != tt.want {
			t.Errorf("Check(%s, %v) = %v, want allowed=%v", tt.addr, tt.allow, err, tt.want)
		}
		if err != nil && !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("Check(%s) error %v is not permission denied", tt.addr, err)
		}
	}
}
