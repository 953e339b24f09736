package egress

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/miekg/dns"
)

// DNSRecord is one DNS query a sandbox made, for the log.
type DNSRecord struct {
	Sandbox    string
	Generation int64
	Name       string // lower case, without the trailing dot
	Type       string // "A", "AAAA", …
	Allowed    bool   // forwarded upstream, or APIHost answered by the node
	Rcode      string // "NOERROR", "NXDOMAIN", "REFUSED", "SERVFAIL", …
	Reason     string // why it was not forwarded, or which answers were withheld
	Time       time.Time
}

// DNSConfig configures a DNSServer.
type DNSConfig struct {
	// Lookup maps a query's source address to its sandbox; required. Unknown sources
	// are REFUSED.
	Lookup func(remote netip.AddrPort) (SandboxInfo, bool)
	// Upstream is the "ip:port" of the resolver allowed queries go to; required.
	Upstream string
	// Guard holds the node's own addresses; answers with protected addresses that the
	// sandbox's AllowPrivate does not authorise are withheld.
	Guard Guard
	// Log receives every query; it must be safe for concurrent use and quick.
	Log func(DNSRecord)
	// Resolved, if set, learns every address a sandbox was answered for a name, with
	// the record's TTL (see ResolvedNames).
	Resolved func(sandbox, name string, addr netip.Addr, ttl time.Duration)
	// Timeout bounds one upstream exchange; 0 means 5 seconds.
	Timeout time.Duration
	// Logger is the parent logger; nil means slog.Default().
	Logger *slog.Logger
}

// DNSServer answers a sandbox only for names it could reach (SandboxInfo.Decide: its
// policy, its secrets' hosts), forwarding those to the upstream resolver, and answers
// APIHost itself; any other name is NXDOMAIN at once and never leaves the node, so a
// query cannot carry data out in its labels.
type DNSServer struct {
	cfg       DNSConfig
	log       *slog.Logger
	udp, tcp  *dns.Client
	ctx       context.Context
	cancel    context.CancelFunc
	mu        sync.Mutex
	closed    bool
	servers   []*dnsServing
	serveDone sync.WaitGroup
}

type dnsServing struct {
	srv     *dns.Server
	started chan struct{}
	done    chan struct{}
}

// NewDNSServer returns a server that serves nothing until ServePacket or ServeStream.
func NewDNSServer(cfg DNSConfig) (*DNSServer, error) {
	if cfg.Lookup == nil || cfg.Upstream == "" {
		return nil, errdefs.Invalid("egress DNS: Lookup and Upstream are required")
	}
	if _, _, err := net.SplitHostPort(cfg.Upstream); err != nil {
		return nil, errdefs.Invalid("egress DNS: upstream %q is not ip:port", cfg.Upstream)
	}
	if cfg.Log == nil {
		cfg.Log = func(DNSRecord) {}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &DNSServer{
		cfg:    cfg,
		log:    cfg.Logger.With("component", "egress-dns"),
		udp:    &dns.Client{Net: "udp", Timeout: cfg.Timeout},
		tcp:    &dns.Client{Net: "tcp", Timeout: cfg.Timeout},
		ctx:    ctx,
		cancel: cancel,
	}, nil
}

// ServePacket serves queries over UDP on pc until Close.
func (s *DNSServer) ServePacket(pc net.PacketConn) error {
	return s.serve(&dns.Server{PacketConn: pc, Handler: s})
}

// ServeStream serves queries over TCP on l until Close.
func (s *DNSServer) ServeStream(l net.Listener) error {
	return s.serve(&dns.Server{Listener: l, Handler: s})
}

func (s *DNSServer) serve(srv *dns.Server) error {
	sv := &dnsServing{srv: srv, started: make(chan struct{}), done: make(chan struct{})}
	srv.NotifyStartedFunc = func() { close(sv.started) }
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errdefs.Unavailable("the egress DNS server is closed")
	}
	s.servers = append(s.servers, sv)
	s.serveDone.Add(1)
	s.mu.Unlock()
	defer s.serveDone.Done()
	defer close(sv.done)
	return srv.ActivateAndServe()
}

// Close stops every server, cancels upstream queries and waits for the servers to end.
func (s *DNSServer) Close() error {
	s.mu.Lock()
	s.closed = true
	servers := slices.Clone(s.servers)
	s.mu.Unlock()
	s.cancel()
	var errs []error
	for _, sv := range servers {
		select {
		case <-sv.started:
			errs = append(errs, sv.srv.Shutdown())
		case <-sv.done: // it never started
		}
	}
	s.serveDone.Wait()
	return errors.Join(errs...)
}

// ServeDNS answers one query.
func (s *DNSServer) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.RecursionAvailable = true
	rec := DNSRecord{Time: time.Now()}
	defer func() {
		rec.Rcode = dns.RcodeToString[resp.Rcode]
		s.cfg.Log(rec)
		writeDNS(w, req, resp)
	}()
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		resp.Rcode, rec.Reason = dns.RcodeNotImplemented, "only single-question queries are served"
		return
	}
	q := req.Question[0]
	rec.Name = strings.ToLower(strings.TrimSuffix(q.Name, "."))
	rec.Type = dns.TypeToString[q.Qtype]
	remote, _ := netip.ParseAddrPort(w.RemoteAddr().String())
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	sb, ok := s.cfg.Lookup(remote)
	if !ok {
		resp.Rcode, rec.Reason = dns.RcodeRefused, "unknown source "+remote.String()
		return
	}
	rec.Sandbox, rec.Generation = sb.ID, sb.Generation
	switch {
	case q.Qclass != dns.ClassINET:
		resp.Rcode, rec.Reason = dns.RcodeRefused, "only class IN is served"
		return
	case q.Qtype == dns.TypeANY || q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR:
		resp.Rcode, rec.Reason = dns.RcodeNotImplemented, "query type "+rec.Type+" is not served"
		return
	}
	if reason := nameRefused(sb, rec.Name); reason != "" {
		resp.Rcode, rec.Reason = dns.RcodeNameError, reason
		return
	}
	rec.Allowed = true
	if rec.Name == APIHost {
		// The node's own name: answered here, with an address that only has to exist.
		if q.Qtype == dns.TypeA {
			resp.Answer = []dns.RR{&dns.A{A: apiAddr.AsSlice(),
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}}}
		}
		return
	}
	in, err := s.exchange(rec.Name, q.Qtype)
	if err != nil {
		s.log.Debug("upstream DNS query failed", "name", rec.Name, "type", rec.Type, "err", err)
		resp.Rcode, rec.Reason = dns.RcodeServerFailure, "upstream resolver failed"
		return
	}
	resp.Rcode = in.Rcode
	resp.Ns = in.Ns
	withheld := 0
	for _, rr := range in.Answer {
		addr, ok := rrAddr(rr)
		if ok && s.cfg.Guard.Check(addr, sb.Policy.AllowPrivate) != nil {
			withheld++
			continue
		}
		if ok && s.cfg.Resolved != nil {
			s.cfg.Resolved(sb.ID, rec.Name, addr, time.Duration(rr.Header().Ttl)*time.Second)
		}
		resp.Answer = append(resp.Answer, rr)
	}
	if withheld > 0 {
		rec.Reason = "withheld protected addresses from the answer"
	}
}

// exchange sends a fresh query for name upstream (none of the sandbox's own options or
// id go along), over TCP again when the UDP answer was truncated.
func (s *DNSServer) exchange(name string, qtype uint16) (*dns.Msg, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	q.SetEdns0(1232, false)
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
	defer cancel()
	in, _, err := s.udp.ExchangeContext(ctx, q, s.cfg.Upstream)
	if err == nil && in.Truncated {
		in, _, err = s.tcp.ExchangeContext(ctx, q, s.cfg.Upstream)
	}
	return in, err
}

// rrAddr returns the address an A or AAAA record carries.
func rrAddr(rr dns.RR) (netip.Addr, bool) {
	var ip net.IP
	switch v := rr.(type) {
	case *dns.A:
		ip = v.A
	case *dns.AAAA:
		ip = v.AAAA
	default:
		return netip.Addr{}, false
	}
	a, ok := netip.AddrFromSlice(ip)
	return a.Unmap(), ok
}

func writeDNS(w dns.ResponseWriter, req, resp *dns.Msg) {
	if opt := req.IsEdns0(); opt != nil {
		resp.SetEdns0(max(opt.UDPSize(), dns.MinMsgSize), false)
	}
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = int(max(opt.UDPSize(), dns.MinMsgSize))
		}
		resp.Truncate(size)
	}
	w.WriteMsg(resp)
}

// specialUse are suffixes that are not public DNS names (RFC 6761, 6762, 8375, 9476 and
// common private ones); "any public name" in unrestricted mode does not reach them.
var specialUse = []string{"localhost", "local", "localdomain", "internal", "arpa", "invalid",
	"test", "example", "onion", "alt", "home", "lan", "corp", "intranet", "private"}

// nameRefused says why sandbox sb gets NXDOMAIN for name; "" means the name may be
// answered.
func nameRefused(sb SandboxInfo, name string) string {
	if _, literal := ParseHostLiteral(name); literal {
		return "an IP address is not a name"
	}
	host, err := canonicalHost(name)
	switch {
	case err != nil:
		return err.Error()
	case !strings.Contains(host, "."):
		return "single-label names are not resolved"
	case host == "localhost" || strings.HasSuffix(host, ".localhost"):
		return "localhost is not resolved upstream"
	}
	d := sb.Decide(host, 0, "")
	if !d.Allowed {
		return d.Reason
	}
	if d.Rule == "unrestricted" {
		for _, s := range specialUse {
			if host == s || strings.HasSuffix(host, "."+s) {
				return "." + s + " is not a public name; name it in an allowlist rule to reach it"
			}
		}
	}
	return ""
}
