package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// fakeResolver answers from a table: the n-th lookup of a name gets its n-th answer,
// the last one repeating.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][][]string
	calls   map[string]int
}

func newFakeResolver(answers map[string][][]string) *fakeResolver {
	return &fakeResolver{answers: answers, calls: make(map[string]int)}
}

func (f *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seq, ok := f.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	n := min(f.calls[host], len(seq)-1)
	f.calls[host]++
	var out []netip.Addr
	for _, s := range seq[n] {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

func (f *fakeResolver) set(host string, answers ...[]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers[host] = answers
	f.calls[host] = 0
}

// recordingDial records the addresses it is asked for and connects to none of them:
// it hands back one end of a pipe, so no test traffic leaves the process.
type recordingDial struct {
	mu     sync.Mutex
	dialed []string
	fail   bool
}

func (r *recordingDial) dial(_ context.Context, _, address string) (net.Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dialed = append(r.dialed, address)
	if r.fail {
		return nil, errors.New("test: connection refused")
	}
	a, b := net.Pipe()
	b.Close()
	return a, nil
}

func (r *recordingDial) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.dialed)
}

func TestDialerChecksEveryAddress(t *testing.T) {
	loop8 := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	ten8 := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	tests := []struct {
		name       string
		host       string
		answers    [][]string
		allow      []netip.Prefix
		wantDialed []string
		wantErr    error
	}{
		{"public", "pub.example", [][]string{{"93.184.216.34"}}, nil, []string{"93.184.216.34:443"}, nil},
		{"private", "internal.example", [][]string{{"10.0.0.1"}}, nil, nil, errdefs.ErrPermissionDenied},
		{"private authorised", "internal.example", [][]string{{"10.0.0.1"}}, ten8, []string{"10.0.0.1:443"}, nil},
		{"loopback", "localhost", [][]string{{"127.0.0.1", "::1"}}, nil, nil, errdefs.ErrPermissionDenied},
		{"public then loopback in one answer", "mixed.example", [][]string{{"93.184.216.34", "127.0.0.1"}}, nil, nil, errdefs.ErrPermissionDenied},
		{"metadata", "meta.example", [][]string{{"169.254.169.254"}}, nil, nil, errdefs.ErrPermissionDenied},
		{"metadata despite link-local", "meta.example", [][]string{{"169.254.169.254"}}, []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16")}, nil, errdefs.ErrPermissionDenied},
		{"mapped public A record", "mapped.example", [][]string{{"::ffff:93.184.216.34"}}, nil, []string{"93.184.216.34:443"}, nil},
		{"mapped loopback AAAA", "mapped.example", [][]string{{"::ffff:127.0.0.1"}}, nil, nil, errdefs.ErrPermissionDenied},
		{"NAT64 of loopback", "nat64.example", [][]string{{"64:ff9b::7f00:1"}}, loop8, nil, errdefs.ErrPermissionDenied},
		{"literal in hex", "0x7f.1", nil, nil, nil, errdefs.ErrPermissionDenied},
		{"literal in hex authorised", "0x7f.1", nil, loop8, []string{"127.0.0.1:443"}, nil},
		{"literal zone", "[fe80::1%25eth0]", nil, nil, nil, errdefs.ErrPermissionDenied},
		{"no such host", "nowhere.example", nil, nil, nil, errdefs.ErrUnavailable},
		{"no address", "empty.example", [][]string{{}}, nil, nil, errdefs.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := newFakeResolver(map[string][][]string{})
			if tt.answers != nil {
				res.set(tt.host, tt.answers...)
			}
			rd := &recordingDial{}
			d := &Dialer{Resolver: res, Dial: rd.dial}
			conn, addr, err := d.DialChecked(context.Background(), tt.host, 443, tt.allow)
			if conn != nil {
				conn.Close()
			}
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("DialChecked(%s) error = %v, want %v", tt.host, err, tt.wantErr)
			}
			if got := rd.got(); !slices.Equal(got, tt.wantDialed) {
				t.Errorf("dialed %v, want %v", got, tt.wantDialed)
			}
			if err == nil && addr.String() != tt.wantDialed[0] {
				t.Errorf("DialChecked returned address %s, want %s", addr, tt.wantDialed[0])
			}
		})
	}
}

// TestDialerRebinding: the first answer is public, every later one is loopback. The
// dialer connects to the address it checked, and a later lookup cannot slip loopback
// in between check and dial.
func TestDialerRebinding(t *testing.T) {
	res := newFakeResolver(map[string][][]string{"rebind.example": {{"93.184.216.34"}, {"127.0.0.1"}}})
	rd := &recordingDial{}
	d := &Dialer{Resolver: res, Dial: rd.dial}

	conn, _, err := d.DialChecked(context.Background(), "rebind.example", 443, nil)
	if err != nil {
		t.Fatalf("first DialChecked: %v", err)
	}
	conn.Close()
	if got, want := rd.got(), []string{"93.184.216.34:443"}; !slices.Equal(got, want) {
		t.Fatalf("dialed %v, want %v: the dial must use the checked address, not a new lookup", got, want)
	}
	if res.calls["rebind.example"] != 1 {
		t.Errorf("resolver called %d times for one dial, want 1", res.calls["rebind.example"])
	}
	if _, _, err := d.DialChecked(context.Background(), "rebind.example", 443, nil); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("second DialChecked (now loopback) error = %v, want permission denied", err)
	}
	if got := rd.got(); len(got) != 1 {
		t.Errorf("dialed %v after the rebinding, want nothing new", got)
	}
}

func TestDialerTriesCheckedAddressesInTurn(t *testing.T) {
	res := newFakeResolver(map[string][][]string{"two.example": {{"93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"}}})
	rd := &recordingDial{fail: true}
	d := &Dialer{Resolver: res, Dial: rd.dial}
	_, _, err := d.DialChecked(context.Background(), "two.example", 80, nil)
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("error = %v, want unavailable", err)
	}
	want := []string{"93.184.216.34:80", "[2606:2800:220:1:248:1893:25c8:1946]:80"}
	if got := rd.got(); !slices.Equal(got, want) {
		t.Errorf("dialed %v, want %v", got, want)
	}
}

// TestDialerDefaultDial uses the real socket dial on loopback: allowed when authorised,
// refused before connect otherwise, and refused by the connect-time check on its own.
func TestDialerDefaultDial(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	loop8 := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	d := &Dialer{}

	conn, addr, err := d.DialChecked(context.Background(), "127.0.0.1", port, loop8)
	if err != nil {
		t.Fatalf("DialChecked(127.0.0.1) with 127.0.0.0/8 authorised: %v", err)
	}
	conn.Close()
	if addr.Addr() != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("connected to %s, want 127.0.0.1", addr)
	}
	if _, _, err := d.DialChecked(context.Background(), "2130706433", port, nil); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("DialChecked(2130706433) unauthorised error = %v, want permission denied", err)
	}
	if _, err := d.netDial(nil)(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(port)); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("connect-time check let 127.0.0.1 through: %v", err)
	}
}
