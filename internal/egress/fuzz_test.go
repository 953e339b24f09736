package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// Go minimizes every input that finds new coverage, at a cost that grows with the
// square of its length; the fuzz targets skip inputs longer than any that reaches
// code a shorter one does not: a host name past the 253 bytes allowed, a method.
const (
	maxFuzzHost   = 300
	maxFuzzMethod = 16
)

func FuzzParseHostLiteral(f *testing.F) {
	for _, tt := range []string{"127.0.0.1", "2130706433", "0x7f.1", "0177.0.0.1", "[::ffff:127.0.0.1]",
		"[fe80::1%25eth0]", "10.1", "example.com", "1.2.3.4.5", "0x", "[::1]", "256.1.1.1", "08.1"} {
		f.Add(tt)
	}
	f.Fuzz(func(t *testing.T, host string) {
		if len(host) > maxFuzzHost {
			return
		}
		addr, ok := ParseHostLiteral(host)
		canon, err := canonicalHost(host)
		if ok {
			if err != nil || canon != addr.String() {
				t.Fatalf("literal %q = %s but canonicalHost = %q, %v", host, addr, canon, err)
			}
			if std, err := netip.ParseAddr(host); err == nil && std.Zone() == "" && std != addr {
				t.Fatalf("%q parses as %s, netip says %s", host, addr, std)
			}
			Classify(addr)
		} else if err == nil {
			if _, lit := ParseHostLiteral(canon); lit {
				t.Fatalf("%q is not a literal but its canonical form %q is", host, canon)
			}
		}
	})
}

func FuzzClassify(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "::ffff:127.0.0.1", "2002:7f00:1::", "8.8.8.8", "fd00:ec2::254", "2001::1"} {
		b := netip.MustParseAddr(s).As16()
		f.Add(b[:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var a16 [16]byte
		copy(a16[:], b)
		ip := netip.AddrFrom16(a16)
		c, why := Classify(ip)
		if why == "" {
			t.Fatalf("Classify(%s) = %s without a reason", ip, c)
		}
		if ip.Is4In6() && c == Public {
			t.Fatalf("IPv4-mapped %s classified public", ip)
		}
		v4 := netip.AddrFrom4([4]byte(a16[12:16]))
		if c4, _ := Classify(v4); c4 != Public && ip.Is4In6() && c == Public {
			t.Fatalf("%s embeds protected %s but is public", ip, v4)
		}
		if err := (Guard{}).Check(ip, nil); (err == nil) != (c == Public) {
			t.Fatalf("Check(%s) = %v, class %s", ip, err, c)
		}
	})
}

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"api.example.com:443/GET,POST", "*.corp.dev", "[2001:db8::1]:443", "10.0.0.5:5432/get"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > maxFuzzHost+32 {
			return
		}
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		back, err := ParseRule(r.String())
		if err != nil || !ruleEqual(back, r) {
			t.Fatalf("ParseRule(%q) = %+v, whose String %q reads back as %+v, %v", s, r, r.String(), back, err)
		}
		if err := (Policy{Mode: ModeAllowlist, Rules: []Rule{r}}).Validate(); err != nil {
			t.Fatalf("a parsed rule %+v does not validate: %v", r, err)
		}
	})
}

func FuzzDecide(f *testing.F) {
	f.Add("pypi.org", 443, "GET")
	f.Add("x.archive.ubuntu.com", 80, "POST")
	f.Add("0x7f.1", 0, "")
	f.Fuzz(func(t *testing.T, host string, port int, method string) {
		if len(host) > maxFuzzHost || len(method) > maxFuzzMethod {
			return
		}
		for _, m := range []Mode{ModeNone, ModeDenyAll} {
			if d := (Policy{Mode: m}).Decide(host, port, method); d.Allowed {
				t.Fatalf("%s allowed %q:%d %q", m, host, port, method)
			}
		}
		base := Policy{Mode: ModeBaseline}.Decide(host, port, method)
		if base.Allowed && method != "" && !slices.Contains([]string{"GET", "HEAD"}, upper(method)) {
			t.Fatalf("baseline allowed method %q", method)
		}
		if allow := (Policy{Mode: ModeAllowlist}).Decide(host, port, method); allow.Allowed != base.Allowed {
			t.Fatalf("an empty allowlist decided %q:%d %q as %+v, baseline as %+v", host, port, method, allow, base)
		}
		_, err := canonicalHost(host)
		if d := (Policy{Mode: ModeUnrestricted}).Decide(host, port, method); d.Allowed != (err == nil) {
			t.Fatalf("unrestricted decided %q as %+v, canonicalHost error %v", host, d, err)
		}
	})
}

// clientHello returns the first TLS record a Go client sends for server name sni.
func clientHello(t testing.TB, sni string) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		tls.Client(client, &tls.Config{ServerName: sni}).Handshake()
		client.Close()
	}()
	server.SetDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(server, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(server, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

func TestClientHelloSNI(t *testing.T) {
	hello := clientHello(t, "files.pythonhosted.org")
	br := bufio.NewReaderSize(bytes.NewReader(hello), 5+maxTLSRecord)
	sni, err := clientHelloSNI(br)
	if err != nil || sni != "files.pythonhosted.org" {
		t.Fatalf("clientHelloSNI = %q, %v, want files.pythonhosted.org", sni, err)
	}
	if br.Buffered() != len(hello) {
		t.Errorf("the peek consumed %d bytes of the ClientHello", len(hello)-br.Buffered())
	}
	if _, err := clientHelloSNI(bufio.NewReader(bytes.NewReader(hello[:len(hello)-1]))); err == nil {
		t.Errorf("a cut ClientHello gave no error")
	}
	if sni, err := clientHelloSNI(bufio.NewReader(bytes.NewReader(minimalHello("pypi.org")))); err != nil || sni != "pypi.org" {
		t.Errorf("clientHelloSNI of the minimal ClientHello = %q, %v, want pypi.org", sni, err)
	}
}

// minimalHello is the smallest ClientHello naming sni that a server reads: one cipher
// suite, no compression, the server_name extension alone. A Go client's is over 1.5 KiB,
// most of it a key share.
func minimalHello(sni string) []byte {
	u16 := func(b []byte) []byte { return append([]byte{byte(len(b) >> 8), byte(len(b))}, b...) }
	name := append([]byte{0}, u16([]byte(sni))...) // host_name
	ext := append([]byte{0, 0}, u16(u16(name))...) // server_name
	body := append([]byte{3, 3}, make([]byte, 32)...)
	body = append(body, 0)                          // no session id
	body = append(body, u16([]byte{0x13, 0x01})...) // TLS_AES_128_GCM_SHA256
	body = append(body, 1, 0)                       // null compression
	body = append(body, u16(ext)...)
	msg := append([]byte{1, 0}, u16(body)...) // client_hello, 24-bit length
	return append([]byte{0x16, 3, 1}, u16(msg)...)
}

func upper(s string) string { return string(bytes.ToUpper([]byte(s))) }

// FuzzClientHelloSNI feeds arbitrary first bytes to the ClientHello peek: it must not
// panic, hang or consume anything.
func FuzzClientHelloSNI(f *testing.F) {
	f.Add(minimalHello("pypi.org"))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00})
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		// Room for any header and a ClientHello with a few extensions: a longer input
		// reaches nothing new in the peek and takes long to minimize.
		if len(b) > 512 {
			return
		}
		br := bufio.NewReaderSize(bytes.NewReader(b), 5+maxTLSRecord)
		clientHelloSNI(br)
		rest := make([]byte, len(b)+1)
		n, _ := br.Read(rest)
		if len(b) > 0 && !bytes.Equal(rest[:n], b[:n]) {
			t.Fatalf("the peek consumed input")
		}
	})
}

// FuzzSubstitution: whatever a sandbox puts in its headers, Basic credentials, query and
// path, a secret's value goes only to its host, and there in place of every placeholder
// it was substituted for; nothing panics.
func FuzzSubstitution(f *testing.F) {
	f.Add("Basic "+base64.StdEncoding.EncodeToString([]byte("u:PH_x")), "a=PH_x", "/p", "PH_x", true)
	f.Add("Basic !!!", "", "/PH_x", "", false)
	f.Add("Bearer PH_x", "%50H_x", "/", "xPH_xPH_x", true)
	f.Add("basic UEhfeA", "", "", "", true)
	f.Fuzz(func(t *testing.T, auth, query, path, header string, toItsHost bool) {
		subs := []Substitution{{Secret: "gh", Placeholder: "PH_x", Hosts: []string{"api.example.com"}, Query: true, Headers: []string{"Authorization", "x-key"},
			Value: func() ([]byte, error) { return []byte("VALUE"), nil }}}
		host := "evil.example"
		if toItsHost {
			host = "api.example.com"
		}
		r := &http.Request{Header: http.Header{"Authorization": {auth}, "X-Key": {header}}, URL: &url.URL{Path: path, RawQuery: query}}
		open, names, refusal := openSecrets(r, subs, host, true)
		if refusal != "" {
			if open != nil || !slices.Equal(names, []string{"gh"}) {
				t.Fatalf("refused (%s) with %d values opened, secrets %v", refusal, len(open), names)
			}
			return
		}
		if !toItsHost && len(open) > 0 {
			t.Fatalf("opened the value for %s", host)
		}
		out := r.Clone(context.Background())
		applySecrets(out, open)
		if !toItsHost {
			if !reflect.DeepEqual(out.Header, r.Header) || out.URL.RawQuery != r.URL.RawQuery {
				t.Fatalf("a request to %s was changed: %v %q", host, out.Header, out.URL.RawQuery)
			}
			return
		}
		for _, v := range append(out.Header.Values("X-Key"), out.Header.Get("Authorization"), out.URL.RawQuery) {
			if strings.Contains(v, "PH_x") {
				t.Fatalf("a placeholder is left in %q", v)
			}
		}
		if basicCredentials(r.Header) != nil {
			if creds := basicCredentials(out.Header); len(creds) != 1 || strings.Contains(creds[0], "PH_x") {
				t.Fatalf("Basic credentials %q after substitution", creds)
			}
		}
	})
}

// FuzzSandboxDecide: a secret opens its hosts on ports 80 and 443 only, never in mode
// none; APIHost is open on those ports in every other mode, and on no other port
// whatever the policy; anything else the policy allows stays allowed.
func FuzzSandboxDecide(f *testing.F) {
	f.Add("api.github.com", 443, "POST")
	f.Add("AIRLOCK.internal.", 80, "GET")
	f.Add("x.api.github.com", 8443, "")
	f.Add("AIRLOCK.internAl", 150, "0") // reserved: never dialled, even where the policy is unrestricted
	f.Fuzz(func(t *testing.T, host string, port int, method string) {
		if len(host) > maxFuzzHost || len(method) > maxFuzzMethod {
			return
		}
		subs := []Substitution{{Secret: "gh", Placeholder: "p", Hosts: []string{"api.github.com", "*.example.com"}}}
		h, err := canonicalHost(host)
		for _, m := range modes {
			sb := SandboxInfo{Policy: Policy{Mode: m}, Secrets: subs}
			d := sb.Decide(host, port, method)
			if m == ModeNone && d.Allowed {
				t.Fatalf("mode none allowed %q:%d", host, port)
			}
			if d.Allowed && err != nil {
				t.Fatalf("%s allowed %q, which is not a host (%v)", m, host, err)
			}
			web := port == 0 || port == 80 || port == 443
			if m != ModeNone && err == nil && h == APIHost && d.Allowed != web {
				t.Fatalf("%s decided %s:%d as %+v", m, APIHost, port, d)
			}
			if strings.HasPrefix(d.Rule, "secret:") && !web {
				t.Fatalf("%s opened %q:%d for a secret", m, host, port)
			}
			if base := (Policy{Mode: m}).Decide(host, port, method); base.Allowed && !d.Allowed && h != APIHost {
				t.Fatalf("%s: the policy allows %q:%d %q, the sandbox not", m, host, port, method)
			}
		}
	})
}
