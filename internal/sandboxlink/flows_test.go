package sandboxlink

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// burstFrom opens n connections to dst, one after another, alternating between the
// namespaces at paths, each given flowDialTimeout to be accepted and read to its end.
// It returns how many were accepted and how long the whole burst took.
func burstFrom(paths []string, dst []netip.AddrPort, n int) (accepted int, took time.Duration, err error) {
	start := time.Now()
	for i := range n {
		err = inNetns(paths[i%len(paths)], func() error {
			d := net.Dialer{Timeout: flowDialTimeout}
			c, err := d.Dial("tcp4", dst[i%len(dst)].String())
			if err != nil {
				return nil // dropped: the SYN was not answered in time
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := io.Copy(io.Discard, c); err != nil {
				return err
			}
			accepted++
			return nil
		})
		if err != nil {
			return accepted, time.Since(start), err
		}
	}
	return accepted, time.Since(start), nil
}

// A dropped SYN costs the burst this long; the rates the tests set give a token every
// 100 ms, so every attempt over the rate is one the bucket has no token for.
const flowDialTimeout = 10 * time.Millisecond

// flood opens 150 connections as burstFrom does and checks that no more were accepted
// than rate a second allows, and no fewer than the rate (the burst alone allows twice
// that). It returns how many were accepted.
func flood(t *testing.T, rate int, paths []string, dst []netip.AddrPort) int {
	t.Helper()
	const n = 150
	got, took, err := burstFrom(paths, dst, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d connections accepted in %v", got, n, took)
	if most := mostAccepted(rate, took); got > most || most >= n {
		t.Errorf("%d of %d connections accepted in %v; a rate of %d a second allows at most %d", got, n, took, rate, most)
	}
	if got < rate {
		t.Errorf("only %d connections accepted; the burst alone allows %d", got, 2*rate)
	}
	return got
}

// mostAccepted is the most connections a token bucket of rate a second and a burst of
// twice that can let through in took, plus one for a token that arrives as it ends.
func mostAccepted(rate int, took time.Duration) int {
	return 2*rate + int(took.Seconds()*float64(rate)) + 1
}

// TestNewFlowsArePacedPerSandbox floods the proxy port from one sandbox: no more
// connections get in than its rate allows, another sandbox still connects at once, and
// the flows left behind carry the short closing timeouts, not the host's 120 s.
func TestNewFlowsArePacedPerSandbox(t *testing.T) {
	requireHost(t)
	node := newTestNode(t)
	cfg := node.config()
	cfg.NewFlowRate = 10
	t.Cleanup(func() { sweep(t, cfg) })
	m := openManager(t, cfg)
	startServices(t, node)
	a := create(t, m, "sb_a", "baseline")
	b := create(t, m, "sb_b", "baseline")

	got := flood(t, cfg.NewFlowRate, []string{a.NetnsPath}, []netip.AddrPort{ap(a.HostAddr, proxyPort)})
	// The other sandbox has a bucket of its own.
	if reply, err := tcpFrom(b.NetnsPath, ap(b.HostAddr, proxyPort)); err != nil || reply != "proxy" {
		t.Errorf("the other sandbox, right after the flood: %q, %v; want proxy", reply, err)
	}
	if reply, err := udpFrom(b.NetnsPath, ap(b.HostAddr, dnsPort)); err != nil || reply != "dns:q" {
		t.Errorf("the other sandbox's DNS query: %q, %v; want dns:q", reply, err)
	}

	entries := conntrack(t, node.path)
	var tcp, udp, long int
	for _, e := range entries {
		switch {
		case e.proto == "tcp" && (e.src == a.SandboxAddr || e.src == b.SandboxAddr):
			tcp++
			if e.state != "ESTABLISHED" && e.timeout > 10 {
				if long++; long == 1 {
					t.Errorf("a sandbox's closed flow in %s expires in %d s; want at most 10: %s", e.state, e.timeout, e.line)
				}
			}
		case e.proto == "udp" && e.src == b.SandboxAddr:
			udp++
			if e.timeout > 30 {
				t.Errorf("a sandbox's DNS flow expires in %d s; want at most 30: %s", e.timeout, e.line)
			}
		}
	}
	// The first of a's flows may have expired already on a slow machine; b's are fresh.
	if tcp == 0 || udp != 1 {
		t.Errorf("found %d TCP and %d UDP flows of the sandboxes in the node's table (%d accepted); want some and 1", tcp, udp, got)
	}
}

// TestNewFlowsArePacedPerNode floods from two sandboxes in turn, each allowed far more
// than the node: together they get no more than the node's rate.
func TestNewFlowsArePacedPerNode(t *testing.T) {
	requireHost(t)
	node := newTestNode(t)
	cfg := node.config()
	cfg.NewFlowRate, cfg.NodeNewFlowRate = 1000, 10
	t.Cleanup(func() { sweep(t, cfg) })
	m := openManager(t, cfg)
	startServices(t, node)
	a := create(t, m, "sb_a", "baseline")
	b := create(t, m, "sb_b", "baseline")

	flood(t, cfg.NodeNewFlowRate, []string{a.NetnsPath, b.NetnsPath}, []netip.AddrPort{ap(a.HostAddr, proxyPort), ap(b.HostAddr, proxyPort)})
}

func TestFlowRateValidation(t *testing.T) {
	base := Config{Subnet: testSubnet, HostPrefix: "al", RunDir: "/run/x", ProxyPort: 1, TransparentHTTPPort: 2,
		TransparentTLSPort: 3, TransparentTCPPort: 4, DNSPort: 5}
	for _, c := range []struct {
		sandbox, node int
		ok            bool
	}{{0, 0, true}, {1, 1, true}, {maxFlowRate, maxFlowRate, true}, {-1, 0, false}, {0, -1, false}, {maxFlowRate + 1, 0, false}} {
		cfg := base
		cfg.NewFlowRate, cfg.NodeNewFlowRate = c.sandbox, c.node
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("rates %d, %d: Validate() = %v, want ok=%v", c.sandbox, c.node, err, c.ok)
		}
	}
	if s, n := base.flowRates(); s != DefaultNewFlowRate || n != DefaultNodeNewFlowRate {
		t.Errorf("default rates %d, %d; want %d, %d", s, n, DefaultNewFlowRate, DefaultNodeNewFlowRate)
	}
}

// ctEntry is one line of the namespace's conntrack table.
type ctEntry struct {
	proto, state string
	timeout      int
	src          netip.Addr
	line         string
}

// conntrack lists the connection-tracking table of the namespace at path.
func conntrack(t *testing.T, path string) []ctEntry {
	t.Helper()
	var out []ctEntry
	err := inNetns(path, func() error {
		f, err := os.Open("/proc/thread-self/net/nf_conntrack")
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// ipv4 2 tcp 6 117 TIME_WAIT src=… dst=… sport=… dport=… …; udp has no state.
			f := strings.Fields(sc.Text())
			if len(f) < 6 {
				return fmt.Errorf("conntrack line %q", sc.Text())
			}
			e := ctEntry{proto: f[2], line: sc.Text()}
			if e.timeout, err = strconv.Atoi(f[4]); err != nil {
				return fmt.Errorf("conntrack line %q: %w", sc.Text(), err)
			}
			if !strings.Contains(f[5], "=") {
				e.state = f[5]
			}
			for _, kv := range f[5:] {
				if v, ok := strings.CutPrefix(kv, "src="); ok {
					e.src, _ = netip.ParseAddr(v)
					break
				}
			}
			out = append(out, e)
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
