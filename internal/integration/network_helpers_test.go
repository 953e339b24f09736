package integration

// The network tests' own "internet", on the host's loopback: an HTTP and an HTTPS
// upstream (certificates minted per server name by a test CA the node's proxy is told
// to trust), a DNS server that answers every name with the upstream's address and
// counts the queries it gets, and traps (listeners that must never see a connection).
// Sandboxes reach the upstream only through the node's egress proxy, with
// allow_private authorising the loopback.
//
// Two things about the host's loopback shape the helpers:
//
//   - A sandbox cannot address the host's loopback itself (127.0.0.1 inside it is its
//     own). Clients that honour HTTP(S)_PROXY never resolve the name; clients that
//     ignore it are pointed at netFrontAddr, a routable address, as if DNS had answered a
//     public one: nftables redirects ports 80 and 443 to the proxy's transparent
//     listeners, and the proxy decides by Host/SNI and resolves the name itself.
//   - The proxy resolves names through the node's upstream DNS, as the sandboxes' DNS
//     does. The world also points the process's own resolver at a second listener of
//     its DNS server and counts those queries apart ("host"), so a proxy that fell
//     back to the host's resolver is caught (TestNetworkModes/DNS).

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// netRequireHostNetns fails the test when the process's main thread is not in the
// namespace of its other threads (sandbox setup must never leave a thread elsewhere): a
// node started now would take that namespace for the host's.
func netRequireHostNetns(t testing.TB) {
	t.Helper()
	main, _ := os.Readlink("/proc/self/ns/net")
	ch := make(chan string)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		l, _ := os.Readlink("/proc/thread-self/ns/net")
		ch <- l
	}()
	if other := <-ch; main != other {
		t.Fatalf("the main thread is in network namespace %s, other threads in %s: "+
			"sandboxlink.onThread left the main thread in a sandbox's namespace and sandboxlink.New takes "+
			"/proc/self/ns/net for the host's", main, other)
	}
}

// netFrontAddr is where clients that ignore the proxy variables connect: a documentation
// address (TEST-NET-3), routed out of the sandbox through its veth and, on ports 80 and
// 443, redirected to the proxy; nothing else would ever answer it.
const netFrontAddr = "203.0.113.7"

// netLoopback8 authorises the host's loopback, where the test upstreams live.
var netLoopback8 = []string{"127.0.0.0/8"}

// netWorld is one test's internet.
type netWorld struct {
	t      testing.TB
	ip     netip.Addr // the upstream's address; every name resolves to it unless told otherwise
	caFile string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	certs  sync.Map // server name → *tls.Certificate
	dns    *netTestDNS

	mu   sync.Mutex
	hits map[string]int       // "METHOD host" (host lower case, no port) → requests the upstreams served
	seen map[string][]netSeen // host → the last requests' headers and query strings

	inflight, peak atomic.Int64 // requests inside /hold
}

// newNetWorld starts the upstreams on ports 80 and 443 of 127.0.0.1 (or, when another
// process holds them, of a random 127.x.y.z) and the DNS server, and points the
// process's resolver at the DNS server for the test's duration.
func newNetWorld(t testing.TB) *netWorld {
	t.Helper()
	w := &netWorld{t: t, hits: map[string]int{}, seen: map[string][]netSeen{}}
	w.makeCA()
	var l80, l443 net.Listener
	for attempt := 0; attempt < 20; attempt++ {
		ip := netip.MustParseAddr("127.0.0.1")
		if attempt > 0 {
			b := make([]byte, 3)
			rand.Read(b)
			ip = netip.AddrFrom4([4]byte{127, 100 + b[0]%100, b[1], 1 + b[2]%250})
		}
		var err error
		if l80, err = net.Listen("tcp4", netip.AddrPortFrom(ip, 80).String()); err != nil {
			continue
		}
		if l443, err = net.Listen("tcp4", netip.AddrPortFrom(ip, 443).String()); err != nil {
			l80.Close()
			continue
		}
		w.ip = ip
		break
	}
	if !w.ip.IsValid() {
		t.Fatal("no loopback address with ports 80 and 443 free")
	}
	hs := &http.Server{Handler: w, ReadHeaderTimeout: 10 * time.Second, ErrorLog: netQuietLog()}
	tlsSrv := w.httpsServer()
	go hs.Serve(l80)
	go tlsSrv.ServeTLS(l443, "", "")
	t.Cleanup(func() { hs.Close(); tlsSrv.Close() })
	w.dns = newNetTestDNS(t, w.ip)
	w.dns.useAsHostResolver(t) // the node also resolves through it (Options.UpstreamDNS)
	return w
}

// node starts a node whose DNS forwards to the world's DNS and whose proxy trusts its CA.
func (w *netWorld) node(t testing.TB) *testenv.Node {
	t.Helper()
	netRequireHostNetns(t)
	return testenv.NewNode(t, testenv.Options{Network: true, UpstreamDNS: w.dns.addr, ExtraCAs: []string{w.caFile}})
}

// httpsServer is the world's HTTPS upstream, offering HTTP/2 and HTTP/1.1.
func (w *netWorld) httpsServer() *http.Server {
	return &http.Server{Handler: w, ReadHeaderTimeout: 10 * time.Second, ErrorLog: netQuietLog(),
		TLSConfig: &tls.Config{GetCertificate: w.leaf, NextProtos: []string{"h2", "http/1.1"}}}
}

func netQuietLog() *log.Logger { return log.New(io.Discard, "", 0) }

func (w *netWorld) makeCA() {
	t := w.t
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "Airlock network tests CA " + randHex(4)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	w.caCert, _ = x509.ParseCertificate(der)
	w.caKey = key
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	dir, err := os.MkdirTemp("", "al-netca-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	w.caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(w.caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
}

// leaf mints (once) a certificate for the ClientHello's server name.
func (w *netWorld) leaf(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := strings.ToLower(hello.ServerName)
	if name == "" {
		name = "no-sni.invalid"
	}
	if c, ok := w.certs.Load(name); ok {
		return c.(*tls.Certificate), nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if a, err := netip.ParseAddr(name); err == nil {
		tmpl.IPAddresses = []net.IP{a.AsSlice()}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, w.caCert, &key.PublicKey, w.caKey)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, w.caCert.Raw}, PrivateKey: key}
	actual, _ := w.certs.LoadOrStore(name, c)
	return actual.(*tls.Certificate), nil
}

// zeros is the body /bytes streams from.
var netZeros = make([]byte, 1<<20)

// ServeHTTP is both upstreams:
//
//	/                 "hello from HOST"
//	/bytes?n=N        N zero bytes
//	/redirect?to=URL  302 to URL
//	/hold?ms=N        answers after N ms (counting requests in flight)
//	/echo             the request as JSON, its Authorization in X-Echo-Authorization too
//	/echo?gzip        the same, gzip-encoded
//
// any other method than GET and HEAD reads the body and answers "METHOD N bytes".
func (w *netWorld) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	w.mu.Lock()
	w.hits[r.Method+" "+host]++
	w.seen[host] = append(w.seen[host][max(0, len(w.seen[host])-15):], netSeen{Header: r.Header.Clone(), Query: r.URL.RawQuery})
	w.mu.Unlock()
	q := r.URL.Query()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(rw, "%s %d bytes to %s\n", r.Method, n, host)
		return
	}
	switch r.URL.Path {
	case "/bytes":
		n, _ := strconv.ParseInt(q.Get("n"), 10, 64)
		rw.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		rw.Header().Set("Content-Type", "application/octet-stream")
		for n > 0 {
			k := min(n, int64(len(netZeros)))
			if _, err := rw.Write(netZeros[:k]); err != nil {
				return
			}
			n -= k
		}
	case "/redirect":
		http.Redirect(rw, r, q.Get("to"), http.StatusFound)
	case "/hold":
		cur := w.inflight.Add(1)
		for {
			p := w.peak.Load()
			if cur <= p || w.peak.CompareAndSwap(p, cur) {
				break
			}
		}
		ms, _ := strconv.Atoi(q.Get("ms"))
		select {
		case <-time.After(time.Duration(min(ms, 30000)) * time.Millisecond):
		case <-r.Context().Done():
		}
		w.inflight.Add(-1)
		fmt.Fprintf(rw, "held %s\n", host)
	case "/echo":
		var out io.Writer = rw
		if q.Has("gzip") {
			rw.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(rw)
			defer zw.Close()
			out = zw
		}
		rw.Header().Set("X-Echo-Authorization", r.Header.Get("Authorization"))
		json.NewEncoder(out).Encode(map[string]any{"method": r.Method, "host": r.Host, "uri": r.RequestURI,
			"tls": r.TLS != nil, "header": r.Header})
	default:
		fmt.Fprintf(rw, "hello from %s\n", host)
	}
}

// netSeen is what an upstream received of one request, besides its body.
type netSeen struct {
	Header http.Header
	Query  string
}

// lastSeen is the last request the upstreams received for host.
func (w *netWorld) lastSeen(host string) (netSeen, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.seen[strings.ToLower(host)]
	if len(s) == 0 {
		return netSeen{}, false
	}
	return s[len(s)-1], true
}

// hitsOf is how many requests the upstreams served for host, with method if given.
func (w *netWorld) hitsOf(host string, method ...string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	host = strings.ToLower(host)
	n := 0
	for k, v := range w.hits {
		m, h, _ := strings.Cut(k, " ")
		if h == host && (len(method) == 0 || method[0] == m) {
			n += v
		}
	}
	return n
}

// totalHits is how many requests the upstreams served in all.
func (w *netWorld) totalHits() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, v := range w.hits {
		n += v
	}
	return n
}

// netTrap is a listener that must never be reached; it counts what reaches it.
type netTrap struct {
	addr  string
	conns atomic.Int64
	pkts  atomic.Int64
}

// netTCPTrap listens on addr ("ip:port", port 0 for any) and counts accepted connections.
func netTCPTrap(t testing.TB, addr string) *netTrap {
	t.Helper()
	l, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatalf("trap %s: %v", addr, err)
	}
	tr := &netTrap{addr: l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			tr.conns.Add(1)
			c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\ntrapped\n"))
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return tr
}

// netUDPTrap listens on addr and counts datagrams, answering each.
func netUDPTrap(t testing.TB, addr string) *netTrap {
	t.Helper()
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		t.Fatalf("trap %s: %v", addr, err)
	}
	tr := &netTrap{addr: pc.LocalAddr().String()}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			tr.pkts.Add(1)
			pc.WriteTo(buf[:n], from)
		}
	}()
	t.Cleanup(func() { pc.Close() })
	return tr
}

func (tr *netTrap) port() string { _, p, _ := net.SplitHostPort(tr.addr); return p }

// netTestDNS answers A queries with the world's address (or a name's own answers), AAAA
// and other types with no records, and counts every query by listener and name.
type netTestDNS struct {
	ip       netip.Addr
	addr     string // the node's upstream
	hostAddr string // the process resolver's server

	mu      sync.Mutex
	queries map[string]map[string]int // "upstream" or "host" → name → queries
	aCount  map[string]int            // name → A queries over both listeners
	answers map[string][]netip.Addr   // fixed A answers
	rebind  map[string][]netip.Addr   // A answers in turn; the last repeats
	nx      map[string]bool
}

func newNetTestDNS(t testing.TB, ip netip.Addr) *netTestDNS {
	t.Helper()
	d := &netTestDNS{ip: ip, queries: map[string]map[string]int{"upstream": {}, "host": {}},
		aCount: map[string]int{}, answers: map[string][]netip.Addr{}, rebind: map[string][]netip.Addr{}, nx: map[string]bool{}}
	d.addr = d.serve(t, "upstream")
	d.hostAddr = d.serve(t, "host")
	return d
}

// serve starts UDP and TCP servers on one port of 127.0.0.1 and returns "ip:port".
func (d *netTestDNS) serve(t testing.TB, tag string) string {
	t.Helper()
	h := dns.HandlerFunc(func(rw dns.ResponseWriter, req *dns.Msg) { d.answer(tag, rw, req) })
	for attempt := 0; attempt < 20; attempt++ {
		pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp4", pc.LocalAddr().String())
		if err != nil {
			pc.Close()
			continue
		}
		for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: l, Handler: h}} {
			started := make(chan struct{})
			srv.NotifyStartedFunc = func() { close(started) }
			go srv.ActivateAndServe()
			<-started
			t.Cleanup(func() { srv.Shutdown() })
		}
		return pc.LocalAddr().String()
	}
	t.Fatal("no port free for the test DNS on both UDP and TCP")
	return ""
}

func (d *netTestDNS) answer(tag string, rw dns.ResponseWriter, req *dns.Msg) {
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.Authoritative = true
	defer rw.WriteMsg(resp)
	if len(req.Question) != 1 {
		resp.Rcode = dns.RcodeFormatError
		return
	}
	q := req.Question[0]
	name := strings.ToLower(strings.TrimSuffix(q.Name, "."))
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queries[tag][name]++
	if d.nx[name] {
		resp.Rcode = dns.RcodeNameError
		return
	}
	if q.Qtype != dns.TypeA {
		return
	}
	addrs := []netip.Addr{d.ip}
	if a, ok := d.answers[name]; ok {
		addrs = a
	}
	if seq, ok := d.rebind[name]; ok {
		addrs = []netip.Addr{seq[min(d.aCount[name], len(seq)-1)]}
	}
	d.aCount[name]++
	for _, a := range addrs {
		resp.Answer = append(resp.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0},
			A:   a.AsSlice()})
	}
}

// setAnswers makes name's A answers addrs.
func (d *netTestDNS) setAnswers(name string, addrs ...netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answers[name] = addrs
}

// setRebind makes name's A answers seq in turn (the last repeating), from now on.
func (d *netTestDNS) setRebind(name string, seq ...netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rebind[name] = seq
	d.aCount[name] = 0
}

// count is how many queries for name (any type) a listener got: tag "upstream" (the
// node's DNS forwarding), "host" (the process resolver, which the proxy uses) or "".
func (d *netTestDNS) count(tag, name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	name = strings.ToLower(name)
	if tag != "" {
		return d.queries[tag][name]
	}
	return d.queries["upstream"][name] + d.queries["host"][name]
}

// countSuffix is how many queries for names ending in suffix both listeners got.
func (d *netTestDNS) countSuffix(suffix string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, m := range d.queries {
		for name, c := range m {
			if name == suffix || strings.HasSuffix(name, "."+suffix) {
				n += c
			}
		}
	}
	return n
}

// resolverMu serialises tests that point the process resolver somewhere.
var netResolverMu sync.Mutex

// useAsHostResolver points net.DefaultResolver (which the egress proxy resolves with)
// at the DNS server's "host" listener until the test ends.
func (d *netTestDNS) useAsHostResolver(t testing.TB) {
	netResolverMu.Lock()
	r := net.DefaultResolver
	preferGo, dial := r.PreferGo, r.Dial
	r.PreferGo = true
	addr := d.hostAddr
	r.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var nd net.Dialer
		return nd.DialContext(ctx, network, addr)
	}
	t.Cleanup(func() {
		r.PreferGo, r.Dial = preferGo, dial
		netResolverMu.Unlock()
	})
}

// netProbeScript is the sandboxes' client toolkit; every command prints one JSON object.
//
//	http METHOD URL [--direct] [--data S] [--no-redirect]  urllib (proxy variables honoured
//	                                   unless --direct, which also sends names to netFrontAddr)
//	connect TARGET                     raw CONNECT to the proxy: {"status"}
//	absolute URL [HOST]                raw "GET URL" to the proxy: {"status"}
//	tls ADDR:PORT SNI HOST [VIA]       TLS to ADDR with SNI (through a CONNECT VIA if
//	                                   given), then "GET /" with Host: HOST: {"status"}
//	plain ADDR:PORT HOST               plain HTTP "GET /" to ADDR with Host: HOST
//	tcp HOST PORT                      TCP connect, still open 1 s later: {"ok"}
//	echo HOST PORT TEXT N              send TEXT N times, half-close, read to the end:
//	                                   {"ok": all of it came back, "body"}
//	udp HOST PORT                      datagram out, wait 1 s for one back: {"ok"}
//	dns NAME                           query /etc/resolv.conf's server: {"rcode","addrs"}
//	gai NAME                           getaddrinfo: {"addrs"} or {"error"}
//	batch                              runs a JSON list of commands from stdin, prints a list
const netProbeScript = `
import json, os, socket, ssl, struct, sys, urllib.parse, urllib.request, http.client
FRONT = "` + netFrontAddr + `"

class Done(Exception):
    pass

def out(**kw):
    raise Done(kw)

def proxy_addr():
    u = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
    return u.hostname, u.port

def status_of(sock):
    data = b""
    sock.settimeout(10)
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    if not data:
        return 0, ""
    line = data.split(b"\r\n", 1)[0].decode("latin-1")
    try:
        return int(line.split()[1]), data.decode("latin-1")
    except Exception:
        return -1, line

def is_ip(h):
    try:
        socket.inet_pton(socket.AF_INET, h); return True
    except OSError:
        pass
    try:
        socket.inet_pton(socket.AF_INET6, h); return True
    except OSError:
        return False

GAI = socket.getaddrinfo

def run(cmd, args):
  socket.getaddrinfo = GAI
  try:
      if cmd == "http":
          method, url = args[0], args[1]
          data = args[args.index("--data") + 1].encode() if "--data" in args else None
          handlers = []
          if "--direct" in args:
              handlers.append(urllib.request.ProxyHandler({}))
              def front(host, *a, **k):
                  if isinstance(host, str) and not is_ip(host) and host != "localhost":
                      host = FRONT
                  return GAI(host, *a, **k)
              socket.getaddrinfo = front
          if "--no-redirect" in args:
              class NoRedirect(urllib.request.HTTPRedirectHandler):
                  def redirect_request(self, *a, **k):
                      return None
              handlers.append(NoRedirect())
          opener = urllib.request.build_opener(*handlers)
          req = urllib.request.Request(url, data=data, method=method)
          try:
              with opener.open(req, timeout=15) as r:
                  out(status=r.status, body=r.read(300).decode("latin-1"), url=r.url)
          except urllib.error.HTTPError as e:
              out(status=e.code, body=e.read(300).decode("latin-1"))
      elif cmd == "connect":
          s = socket.create_connection(proxy_addr(), timeout=10)
          s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (args[0], args[0])).encode())
          st, text = status_of(s)
          out(status=st, text=text[:300])
      elif cmd == "absolute":
          host = args[1] if len(args) > 1 else urllib.parse.urlsplit(args[0]).netloc.rsplit("@", 1)[-1]
          s = socket.create_connection(proxy_addr(), timeout=10)
          s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (args[0], host)).encode())
          st, text = status_of(s)
          out(status=st, text=text[:300])
      elif cmd in ("tls", "plain"):
          addr, port = args[0].rsplit(":", 1)
          if cmd == "tls" and len(args) > 3:
              s = socket.create_connection(proxy_addr(), timeout=10)
              s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (args[3], args[3])).encode())
              st, _ = status_of(s)
              if st != 200:
                  out(status=0, connect=st)
          else:
              s = socket.create_connection((addr, int(port)), timeout=10)
          host = args[2] if cmd == "tls" else args[1]
          if cmd == "tls":
              ctx = ssl.create_default_context()
              ctx.check_hostname = False
              s = ctx.wrap_socket(s, server_hostname=args[1])
          s.sendall(("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host).encode())
          st, text = status_of(s)
          out(status=st, text=text[:300])
      elif cmd == "tcp":
          # Connected is not enough: the proxy's relay accepts every redirected
          # connection and resets the ones policy refuses. Open means still open (or
          # talking) after a moment.
          s = socket.create_connection((args[0], int(args[1])), timeout=5)
          s.settimeout(1)
          try:
              first = s.recv(1)
          except socket.timeout:
              out(ok=True)
          if not first:
              out(ok=False, error="closed at once")
          out(ok=True)
      elif cmd == "echo":
          s = socket.create_connection((args[0], int(args[1])), timeout=5)
          s.settimeout(10)
          msg = args[2].encode() * int(args[3])
          s.sendall(msg)
          s.shutdown(socket.SHUT_WR)
          got = b""
          while True:
              chunk = s.recv(65536)
              if not chunk:
                  break
              got += chunk
          out(ok=got == msg, body="%d of %d bytes echoed" % (len(got), len(msg)))
      elif cmd == "udp":
          s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
          s.settimeout(1)
          s.connect((args[0], int(args[1])))  # connected: ICMP errors come back as errors
          s.send(b"probe")
          try:
              s.recv(2048)
              out(ok=True)
          except OSError as e:
              out(ok=False, error="%s: %s" % (type(e).__name__, e))
      elif cmd == "dns":
          server = None
          for line in open("/etc/resolv.conf"):
              f = line.split()
              if len(f) >= 2 and f[0] == "nameserver":
                  server = f[1]; break
          qid = int.from_bytes(os.urandom(2), "big")
          q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
          for label in args[0].rstrip(".").split("."):
              q += bytes([len(label)]) + label.encode()
          q += b"\x00" + struct.pack(">HH", 1, 1)
          s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
          s.settimeout(3)
          s.connect((server, 53))
          s.send(q)
          resp = s.recv(4096)
          _, flags, qd, an, _, _ = struct.unpack(">HHHHHH", resp[:12])
          i = 12
          def skip_name(i):
              while True:
                  n = resp[i]
                  if n == 0: return i + 1
                  if n & 0xC0 == 0xC0: return i + 2
                  i += n + 1
          for _ in range(qd):
              i = skip_name(i) + 4
          addrs = []
          for _ in range(an):
              i = skip_name(i)
              typ, _, _, rdlen = struct.unpack(">HHIH", resp[i:i+10])
              i += 10
              if typ == 1:
                  addrs.append(socket.inet_ntoa(resp[i:i+4]))
              i += rdlen
          out(rcode=flags & 0xF, addrs=addrs)
      elif cmd == "gai":
          addrs = sorted({a[4][0] for a in socket.getaddrinfo(args[0], 443, proto=socket.IPPROTO_TCP)})
          out(addrs=addrs)
      else:
          out(error="unknown command " + cmd)
  except Done as d:
    return d.args[0]
  except BaseException as e:
    return {"error": "%s: %s" % (type(e).__name__, e)}
  return {"error": "no result"}

if sys.argv[1] == "batch":
    print(json.dumps([run(c[0], c[1:]) for c in json.load(sys.stdin)]))
else:
    print(json.dumps(run(sys.argv[1], sys.argv[2:])))
`

// netProbeResult is what netProbeScript prints.
type netProbeResult struct {
	Status  int      `json:"status"`
	Connect int      `json:"connect"`
	Body    string   `json:"body"`
	Text    string   `json:"text"`
	URL     string   `json:"url"`
	OK      bool     `json:"ok"`
	Rcode   *int     `json:"rcode"`
	Addrs   []string `json:"addrs"`
	Error   string   `json:"error"`
}

func (r netProbeResult) String() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// netInstallProbe writes netProbeScript to /tmp/probe.py in the sandbox.
func netInstallProbe(t testing.TB, n *testenv.Node, ref string) {
	t.Helper()
	res, err := n.Client.Exec(background, ref, api.ExecRequest{Shell: "cat > /tmp/probe.py", Stdin: netProbeScript, Timeout: execTimeout})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("install the probe in %s: %v %+v", ref, err, res)
	}
}

// netProbe runs netProbeScript in the sandbox.
func netProbe(t testing.TB, n *testenv.Node, ref string, args ...string) netProbeResult {
	t.Helper()
	res, err := n.Client.Exec(background, ref, api.ExecRequest{Argv: append([]string{"python3", "/tmp/probe.py"}, args...), Timeout: "30s"})
	if err != nil {
		t.Fatalf("probe %v in %s: %v", args, ref, err)
	}
	var out netProbeResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(res.Stdout)), &out); err != nil {
		t.Fatalf("probe %v in %s: bad output %q (stderr %q, state %s)", args, ref, res.Stdout, res.Stderr, res.State)
	}
	return out
}

// netProbeBatch runs several probe commands in one exec and returns their results in order.
func netProbeBatch(t testing.TB, n *testenv.Node, ref string, cmds [][]string) []netProbeResult {
	t.Helper()
	in, _ := json.Marshal(cmds)
	res, err := n.Client.Exec(background, ref, api.ExecRequest{Argv: []string{"python3", "/tmp/probe.py", "batch"},
		Stdin: string(in), Timeout: "120s"})
	if err != nil {
		t.Fatalf("probe batch in %s: %v", ref, err)
	}
	var out []netProbeResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(res.Stdout)), &out); err != nil || len(out) != len(cmds) {
		t.Fatalf("probe batch in %s: bad output %q (stderr %q, state %s): %v", ref, netTrim(res.Stdout, 500), res.Stderr, res.State, err)
	}
	return out
}

// sbCurlResult is one curl run in a sandbox.
type sbCurlResult struct {
	Exit    int
	Code    int // %{http_code}
	Connect int // %{http_connect}: the proxy's answer to CONNECT
	Body    string
	Stderr  string
}

func (c sbCurlResult) String() string {
	return fmt.Sprintf("exit %d code %d connect %d body %q stderr %q", c.Exit, c.Code, c.Connect, netTrim(c.Body, 200), netTrim(c.Stderr, 300))
}

// netFetchResult is the request's outcome: the proxy's refusal of CONNECT, else the last
// HTTP status, or 0 when curl failed to connect (following a redirect, say).
func (c sbCurlResult) netFetchResult() netFetchResult {
	status := c.Code
	switch {
	case c.Connect != 0 && c.Connect != 200:
		status = c.Connect
	case c.Exit != 0:
		status = 0
	}
	return netFetchResult{Status: status, Body: c.Body, Detail: c.String()}
}

func netTrim(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// sbCurl runs curl in the sandbox with args (after -sS --max-time 15) and returns the
// body and the codes.
func sbCurl(t testing.TB, n *testenv.Node, ref string, args ...string) sbCurlResult {
	t.Helper()
	argv := append([]string{"curl", "-sS", "--max-time", "15", "-w", "%{stderr}\n@@codes %{http_code} %{http_connect}\n"}, args...)
	res, err := n.Client.Exec(background, ref, api.ExecRequest{Argv: argv, Timeout: "30s"})
	if err != nil {
		t.Fatalf("curl %v in %s: %v", args, ref, err)
	}
	out := sbCurlResult{Exit: res.ExitCode, Body: res.Stdout}
	stderr, codes, _ := strings.Cut(res.Stderr, "\n@@codes ")
	out.Stderr = strings.TrimSpace(stderr)
	fmt.Sscanf(codes, "%d %d", &out.Code, &out.Connect)
	return out
}

// sbCurlDirect is curl ignoring the proxy variables, with host sent to netFrontAddr.
func sbCurlDirect(t testing.TB, n *testenv.Node, ref, host, url string, args ...string) sbCurlResult {
	t.Helper()
	base := []string{"--noproxy", "*", "--resolve", host + ":443:" + netFrontAddr, "--resolve", host + ":80:" + netFrontAddr}
	return sbCurl(t, n, ref, append(append(base, args...), url)...)
}

// netHostAddr is the host's source address towards the outside (its main interface),
// or an invalid address if it has no route out.
func netHostAddr() netip.Addr {
	c, err := net.Dial("udp4", "192.0.2.1:9")
	if err != nil {
		return netip.Addr{}
	}
	defer c.Close()
	a, _ := netip.ParseAddrPort(c.LocalAddr().String())
	return a.Addr()
}

// netWaitEgress polls a sandbox's egress log until match finds a record (the audit
// trail is written asynchronously) and returns every record.
func netWaitEgress(t testing.TB, n *testenv.Node, ref, what string, match func(api.EgressRecord) bool) api.EgressRecord {
	t.Helper()
	var recs []api.EgressRecord
	deadline := time.Now().Add(5 * time.Second)
	for {
		var err error
		recs, err = n.Client.EgressLog(background, ref, 0)
		if err != nil {
			t.Fatalf("egress log of %s: %v", ref, err)
		}
		for _, r := range recs {
			if match(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var b bytes.Buffer
	for _, r := range recs {
		fmt.Fprintf(&b, "\n  %+v", r)
	}
	t.Errorf("egress log of %s: no record of %s among %d:%s", ref, what, len(recs), b.String())
	return api.EgressRecord{}
}

// netClient is one way a sandbox program reaches the web.
type netClient string

const (
	curlProxied  netClient = "curl"                 // honours HTTP(S)_PROXY
	curlIgnoring netClient = "curl --noproxy '*'"   // ignores it: the transparent path
	pyProxied    netClient = "python urllib"        // honours the proxy variables
	pyIgnoring   netClient = "python urllib direct" // ProxyHandler({}): the transparent path
)

var netClients = []netClient{curlProxied, curlIgnoring, pyProxied, pyIgnoring}

// netFetchResult is how one request went: the HTTP status the client got (the proxy's
// answer to CONNECT when it refused the tunnel), 0 when the connection failed.
type netFetchResult struct {
	Status int
	Body   string
	Detail string
}

var netTunnelStatus = regexp.MustCompile(`Tunnel connection failed: (\d+)`)

// netFetch makes one request from the sandbox with client c. A method other than GET and
// HEAD sends a small body.
func netFetch(t testing.TB, n *testenv.Node, ref string, c netClient, method, rawURL string) netFetchResult {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	switch c {
	case curlProxied, curlIgnoring:
		var args []string
		switch method {
		case "GET":
		case "HEAD":
			args = append(args, "-I")
		default:
			args = append(args, "-X", method, "--data", "payload")
		}
		var r sbCurlResult
		if c == curlProxied {
			r = sbCurl(t, n, ref, append(args, rawURL)...)
		} else {
			r = sbCurlDirect(t, n, ref, u.Hostname(), rawURL, args...)
		}
		return r.netFetchResult()
	default:
		args := []string{"http", method, rawURL}
		if method != "GET" && method != "HEAD" {
			args = append(args, "--data", "payload")
		}
		if c == pyIgnoring {
			args = append(args, "--direct")
		}
		r := netProbe(t, n, ref, args...)
		status := r.Status
		if m := netTunnelStatus.FindStringSubmatch(r.Error); m != nil {
			status, _ = strconv.Atoi(m[1])
		}
		return netFetchResult{Status: status, Body: r.Body, Detail: r.String()}
	}
}

// netWantAllowed checks that every client gets method through to the upstream at rawURL.
func netWantAllowed(t testing.TB, w *netWorld, n *testenv.Node, ref, method, rawURL string, clients ...netClient) {
	t.Helper()
	if len(clients) == 0 {
		clients = netClients
	}
	u, _ := url.Parse(rawURL)
	host := u.Hostname()
	for _, c := range clients {
		before := w.hitsOf(host, method)
		r := netFetch(t, n, ref, c, method, rawURL)
		want := "hello from " + host
		if method != "GET" && method != "HEAD" {
			want = method + " 7 bytes to " + host
		}
		if r.Status != 200 || (method != "HEAD" && !strings.Contains(r.Body, want)) {
			t.Errorf("%s: %s %s with %s: got %s, want 200 %q", ref, method, rawURL, c, r.Detail, want)
			continue
		}
		if got := w.hitsOf(host, method); got != before+1 {
			t.Errorf("%s: %s %s with %s: the upstream served %d requests, want 1", ref, method, rawURL, c, got-before)
		}
	}
}

// netWantRefused checks that no client gets method through to rawURL: the proxy answers 403
// (to the request or to CONNECT), or the connection fails (a transparent TLS connection
// the proxy refuses is closed), and the upstream never sees the request.
func netWantRefused(t testing.TB, w *netWorld, n *testenv.Node, ref, method, rawURL string, clients ...netClient) {
	t.Helper()
	if len(clients) == 0 {
		clients = netClients
	}
	u, _ := url.Parse(rawURL)
	host := u.Hostname()
	for _, c := range clients {
		before := w.totalHits()
		r := netFetch(t, n, ref, c, method, rawURL)
		if r.Status != 403 && r.Status != 0 {
			t.Errorf("%s: %s %s with %s: got %s, want it refused (403 or no connection)", ref, method, rawURL, c, r.Detail)
		}
		if (c == curlProxied || c == pyProxied) && r.Status != 403 {
			t.Errorf("%s: %s %s with %s: got %s, want the proxy's 403", ref, method, rawURL, c, r.Detail)
		}
		if got := w.totalHits(); got != before {
			t.Errorf("%s: %s %s with %s: the upstreams served %d requests (%s: %d), want none",
				ref, method, rawURL, c, got-before, host, w.hitsOf(host))
		}
	}
}
