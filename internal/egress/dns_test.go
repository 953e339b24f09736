package egress

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/miekg/dns"
)

// dnsEnv is the egress DNS server on loopback (UDP and TCP) in front of a test
// upstream resolver on loopback that records every name it is asked.
type dnsEnv struct {
	t        *testing.T
	srv      *DNSServer
	udpAddr  string
	tcpAddr  string
	sandbox  atomic.Pointer[SandboxInfo]
	mu       sync.Mutex
	upstream []string // names the upstream was asked
	log      []DNSRecord
	names    ResolvedNames
}

var upstreamZone = map[string][]string{
	"pypi.org.":               {"pypi.org. 60 IN A 151.101.0.223", "pypi.org. 60 IN AAAA 2a04:4e42::223"},
	"files.pythonhosted.org.": {"files.pythonhosted.org. 60 IN A 151.101.64.223"},
	"us.archive.ubuntu.com.":  {"us.archive.ubuntu.com. 60 IN A 91.189.91.81"},
	"api.example.org.":        {"api.example.org. 60 IN A 93.184.216.34"},
	"x.corp.example.org.":     {"x.corp.example.org. 60 IN A 93.184.216.37"},
	"any.example.net.":        {"any.example.net. 60 IN A 93.184.216.38"},
	"private.example.org.":    {"private.example.org. 60 IN A 10.0.0.1", "private.example.org. 60 IN A 93.184.216.35", "private.example.org. 60 IN AAAA ::1"},
	"cname.example.org.":      {"cname.example.org. 60 IN CNAME target.example.net.", "target.example.net. 60 IN A 93.184.216.36"},
}

func newDNSEnv(t *testing.T, sb SandboxInfo) *dnsEnv {
	t.Helper()
	e := &dnsEnv{t: t}
	e.sandbox.Store(&sb)
	upstream := e.startUpstream()

	var err error
	e.srv, err = NewDNSServer(DNSConfig{
		Lookup: func(remote netip.AddrPort) (SandboxInfo, bool) {
			if remote.Addr() != netip.MustParseAddr("127.0.0.1") {
				return SandboxInfo{}, false
			}
			return *e.sandbox.Load(), true
		},
		Upstream: upstream,
		Resolved: e.names.Add,
		Log: func(r DNSRecord) {
			e.mu.Lock()
			e.log = append(e.log, r)
			e.mu.Unlock()
		},
		Timeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.udpAddr, e.tcpAddr = pc.LocalAddr().String(), l.Addr().String()
	done := make(chan error, 2)
	go func() { done <- e.srv.ServePacket(pc) }()
	go func() { done <- e.srv.ServeStream(l) }()
	t.Cleanup(func() {
		if err := e.srv.Close(); err != nil {
			t.Errorf("DNS Close: %v", err)
		}
		for range 2 {
			// A serve that had not begun when Close came says the server is closed (a
			// short test may end before its goroutine runs), and leaves its socket be.
			if err := <-done; err != nil && !errors.Is(err, errdefs.ErrUnavailable) {
				t.Errorf("DNS serve: %v", err)
			}
		}
		pc.Close()
		l.Close()
	})
	return e
}

// startUpstream starts the test resolver on UDP and TCP of one loopback port.
func (e *dnsEnv) startUpstream() string {
	h := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		q := req.Question[0]
		e.mu.Lock()
		e.upstream = append(e.upstream, strings.TrimSuffix(q.Name, "."))
		e.mu.Unlock()
		resp := new(dns.Msg)
		resp.SetReply(req)
		if q.Name == "many.example.org." {
			for i := range 120 {
				rr, _ := dns.NewRR("many.example.org. 60 IN A 93.184.217." + strconv.Itoa(i))
				resp.Answer = append(resp.Answer, rr)
			}
		}
		for _, s := range upstreamZone[q.Name] {
			rr, err := dns.NewRR(s)
			if err != nil {
				e.t.Errorf("the test zone's record %q does not parse: %v", s, err)
				continue
			}
			if rr.Header().Rrtype == q.Qtype || rr.Header().Rrtype == dns.TypeCNAME {
				resp.Answer = append(resp.Answer, rr)
			}
		}
		if len(resp.Answer) == 0 && upstreamZone[q.Name] == nil {
			resp.Rcode = dns.RcodeNameError
		}
		if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
			size := dns.MinMsgSize
			if opt := req.IsEdns0(); opt != nil {
				size = int(opt.UDPSize())
			}
			resp.Truncate(size)
		}
		w.WriteMsg(resp)
	})
	// One port number for both; a UDP port's number may be taken for TCP, so try again.
	var pc net.PacketConn
	var l net.Listener
	for attempt := 0; l == nil; attempt++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			e.t.Fatal(err)
		}
		if l, err = net.Listen("tcp", pc.LocalAddr().String()); err != nil {
			pc.Close()
			if attempt == 20 {
				e.t.Fatal(err)
			}
		}
	}
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: l, Handler: h}} {
		started := make(chan struct{})
		done := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { defer close(done); srv.ActivateAndServe() }()
		<-started
		e.t.Cleanup(func() { srv.Shutdown(); <-done })
	}
	return pc.LocalAddr().String()
}

func (e *dnsEnv) setPolicy(p Policy) {
	sb := *e.sandbox.Load()
	sb.Policy = p
	e.sandbox.Store(&sb)
}

// query asks the egress DNS server from source address from over net ("udp", "tcp").
func (e *dnsEnv) query(from, network, name string, qtype uint16) *dns.Msg {
	e.t.Helper()
	c := &dns.Client{Net: network, Timeout: 2 * time.Second}
	addr := e.udpAddr
	if network == "tcp" {
		addr = e.tcpAddr
		c.Dialer = &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	} else {
		c.Dialer = &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(from)}}
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	resp, _, err := c.Exchange(m, addr)
	if err != nil {
		e.t.Fatalf("query %s %s: %v", name, dns.TypeToString[qtype], err)
	}
	return resp
}

func (e *dnsEnv) askedUpstream(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Contains(e.upstream, name)
}

func answers(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch v := rr.(type) {
		case *dns.A:
			out = append(out, v.A.String())
		case *dns.AAAA:
			out = append(out, v.AAAA.String())
		case *dns.CNAME:
			out = append(out, "CNAME "+strings.TrimSuffix(v.Target, "."))
		}
	}
	return out
}

func TestDNSAnswersOnlyReachableNames(t *testing.T) {
	e := newDNSEnv(t, SandboxInfo{ID: "sb_dns", Generation: 3})
	allowlist := Policy{Mode: ModeAllowlist, Rules: []Rule{mustRule(t, "api.example.org/GET"), mustRule(t, "*.corp.example.org")}}
	tests := []struct {
		policy Policy
		name   string
		qtype  uint16
		want   string // "NXDOMAIN" or the answers joined
	}{
		{Policy{Mode: ModeBaseline}, "pypi.org", dns.TypeA, "151.101.0.223"},
		{Policy{Mode: ModeBaseline}, "PyPI.org", dns.TypeAAAA, "2a04:4e42::223"},
		{Policy{Mode: ModeBaseline}, "files.pythonhosted.org", dns.TypeA, "151.101.64.223"},
		{Policy{Mode: ModeBaseline}, "us.archive.ubuntu.com", dns.TypeA, "91.189.91.81"},
		{Policy{Mode: ModeBaseline}, "api.example.org", dns.TypeA, "NXDOMAIN"},
		{Policy{Mode: ModeBaseline}, "c2VjcmV0.exfil.example.com", dns.TypeA, "NXDOMAIN"},
		{Policy{Mode: ModeBaseline}, "c2VjcmV0.pypi.org.evil.example", dns.TypeTXT, "NXDOMAIN"},
		{allowlist, "api.example.org", dns.TypeA, "93.184.216.34"},
		{allowlist, "x.corp.example.org", dns.TypeA, "93.184.216.37"},
		{allowlist, "corp.example.org", dns.TypeA, "NXDOMAIN"},
		{allowlist, "pypi.org", dns.TypeA, "151.101.0.223"},
		{allowlist, "any.example.net", dns.TypeA, "NXDOMAIN"},
		{Policy{Mode: ModeUnrestricted}, "any.example.net", dns.TypeA, "93.184.216.38"},
		{Policy{Mode: ModeUnrestricted}, "cname.example.org", dns.TypeA, "CNAME target.example.net 93.184.216.36"},
		{Policy{Mode: ModeUnrestricted}, "printer.local", dns.TypeA, "NXDOMAIN"},
		{Policy{Mode: ModeUnrestricted}, "db.internal", dns.TypeA, "NXDOMAIN"},
		{Policy{Mode: ModeUnrestricted}, "localhost", dns.TypeA, "NXDOMAIN"},
		{Policy{Mode: ModeUnrestricted}, "intranet", dns.TypeA, "NXDOMAIN"},
		{Policy{Mode: ModeUnrestricted}, "1.0.0.127.in-addr.arpa", dns.TypePTR, "NXDOMAIN"},
		{Policy{Mode: ModeUnrestricted}, "127.0.0.1", dns.TypeA, "NXDOMAIN"},
		{Policy{Mode: ModeNone}, "pypi.org", dns.TypeA, "NXDOMAIN"},
		{Policy{Mode: ModeDenyAll}, "pypi.org", dns.TypeA, "NXDOMAIN"},
	}
	for _, tt := range tests {
		e.setPolicy(tt.policy)
		e.mu.Lock()
		e.upstream = nil
		e.mu.Unlock()
		resp := e.query("127.0.0.1", "udp", tt.name, tt.qtype)
		got := strings.Join(answers(resp), " ")
		if resp.Rcode == dns.RcodeNameError {
			got = "NXDOMAIN"
		}
		if got != tt.want {
			t.Errorf("%s: %s %s = %q (rcode %s), want %q", tt.policy.Mode, tt.name, dns.TypeToString[tt.qtype],
				got, dns.RcodeToString[resp.Rcode], tt.want)
		}
		asked := e.askedUpstream(strings.ToLower(tt.name))
		if tt.want == "NXDOMAIN" && asked {
			t.Errorf("%s: %s was forwarded upstream; a refused name must never leave the node", tt.policy.Mode, tt.name)
		}
		if tt.want != "NXDOMAIN" && !asked {
			t.Errorf("%s: %s was answered without asking upstream", tt.policy.Mode, tt.name)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	i := slices.IndexFunc(e.log, func(r DNSRecord) bool { return r.Name == "c2vjcmv0.exfil.example.com" })
	if i < 0 {
		t.Fatalf("no log record for the refused query; log %+v", e.log)
	}
	if r := e.log[i]; r.Allowed || r.Rcode != "NXDOMAIN" || r.Sandbox != "sb_dns" || r.Generation != 3 || r.Type != "A" ||
		!strings.Contains(r.Reason, "not in the baseline") {
		t.Errorf("log record = %+v, want a refused NXDOMAIN with the reason", r)
	}
}

func TestDNSWithholdsProtectedAddresses(t *testing.T) {
	e := newDNSEnv(t, SandboxInfo{ID: "sb_dns", Policy: Policy{Mode: ModeUnrestricted}})
	if got := answers(e.query("127.0.0.1", "udp", "private.example.org", dns.TypeA)); !slices.Equal(got, []string{"93.184.216.35"}) {
		t.Errorf("answers = %v, want only the public address", got)
	}
	if got := answers(e.query("127.0.0.1", "udp", "private.example.org", dns.TypeAAAA)); len(got) != 0 {
		t.Errorf("AAAA answers = %v, want ::1 withheld", got)
	}
	if got := e.names.Names("sb_dns", netip.MustParseAddr("10.0.0.1")); len(got) != 0 {
		t.Errorf("a withheld address was recorded as resolved: %v", got)
	}
	e.setPolicy(Policy{Mode: ModeUnrestricted, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if got := answers(e.query("127.0.0.1", "udp", "private.example.org", dns.TypeA)); !slices.Equal(got, []string{"10.0.0.1", "93.184.216.35"}) {
		t.Errorf("answers with 10.0.0.0/8 authorised = %v, want both", got)
	}
	if got := e.names.Names("sb_dns", netip.MustParseAddr("10.0.0.1")); !slices.Equal(got, []string{"private.example.org"}) {
		t.Errorf("resolved names of 10.0.0.1 = %v, want the name asked for", got)
	}
}

// TestDNSRecordsResolvedNames: an answer's addresses are recorded under the name the
// sandbox asked for, also through a CNAME; a refused name records nothing.
func TestDNSRecordsResolvedNames(t *testing.T) {
	e := newDNSEnv(t, SandboxInfo{ID: "sb_dns", Policy: Policy{Mode: ModeUnrestricted}})
	e.query("127.0.0.1", "udp", "cname.example.org", dns.TypeA)
	if got := e.names.Names("sb_dns", netip.MustParseAddr("93.184.216.36")); !slices.Equal(got, []string{"cname.example.org"}) {
		t.Errorf("names of the CNAME's address = %v, want the name asked for", got)
	}
	e.setPolicy(Policy{Mode: ModeBaseline})
	e.query("127.0.0.1", "udp", "any.example.net", dns.TypeA)
	if got := e.names.Names("sb_dns", netip.MustParseAddr("93.184.216.38")); len(got) != 0 {
		t.Errorf("a refused name was recorded: %v", got)
	}
}

func TestDNSRefusals(t *testing.T) {
	e := newDNSEnv(t, SandboxInfo{ID: "sb_dns", Policy: Policy{Mode: ModeUnrestricted}})
	if resp := e.query("127.0.0.3", "udp", "pypi.org", dns.TypeA); resp.Rcode != dns.RcodeRefused {
		t.Errorf("query from an unknown source = %s, want REFUSED", dns.RcodeToString[resp.Rcode])
	}
	if resp := e.query("127.0.0.1", "udp", "pypi.org", dns.TypeANY); resp.Rcode != dns.RcodeNotImplemented {
		t.Errorf("ANY query = %s, want NOTIMP", dns.RcodeToString[resp.Rcode])
	}
	if e.askedUpstream("pypi.org") {
		t.Errorf("a refused query was forwarded upstream")
	}
}

// TestDNSLargeAnswer: the upstream truncates over UDP, the server asks again over TCP,
// and a client that asks over TCP gets the whole answer.
func TestDNSLargeAnswer(t *testing.T) {
	e := newDNSEnv(t, SandboxInfo{ID: "sb_dns", Policy: Policy{Mode: ModeUnrestricted}})
	udp := e.query("127.0.0.1", "udp", "many.example.org", dns.TypeA)
	if !udp.Truncated {
		t.Errorf("a 120-address answer over plain UDP was not truncated")
	}
	if got := len(answers(e.query("127.0.0.1", "tcp", "many.example.org", dns.TypeA))); got != 120 {
		t.Errorf("TCP answer has %d addresses, want 120", got)
	}
}
