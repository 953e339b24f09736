package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// Resolver looks names up; *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer connects to a host for a sandbox. It resolves the name once, checks every
// address the name resolves to, and dials exactly the addresses it checked, so an
// answer that changes between the check and the connection (DNS rebinding) cannot
// reach anything the check refused.
type Dialer struct {
	// Resolver looks names up; nil means net.DefaultResolver.
	Resolver Resolver
	// Guard holds the node's own addresses.
	Guard Guard
	// Dial connects to one checked "ip:port"; nil means a net.Dialer whose Control
	// checks the socket's address once more at connect time. Tests replace it.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// AtConnect, if set, is a further check of the default dial's Control, after the
	// Guard's: the node's network refuses there an address the node gained after it
	// started (the Guard's list of the node's own addresses is the one of its start).
	AtConnect func(address string) error
	// Timeout bounds one connection attempt; 0 means 10 seconds.
	Timeout time.Duration
}

// Resolve returns the addresses of host (an IP literal in any encoding, or a name) if
// every one of them may be dialled under allow. A name with any protected address is
// refused as a whole: a mix of public and private answers is a rebinding attempt.
func (d *Dialer) Resolve(ctx context.Context, host string, allow []netip.Prefix) ([]netip.Addr, error) {
	if a, ok := ParseHostLiteral(host); ok {
		if err := d.Guard.Check(a, allow); err != nil {
			return nil, err
		}
		return []netip.Addr{a.WithZone("")}, nil
	}
	res := d.Resolver
	if res == nil {
		res = net.DefaultResolver
	}
	found, err := res.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, &errdefs.Error{Class: errdefs.ErrUnavailable, Msg: "cannot resolve " + host, Cause: err}
	}
	var addrs []netip.Addr
	for _, a := range found {
		// A resolver may hand an A record back IPv4-mapped; the address dialled is the
		// unmapped one, so that is the one checked.
		a = a.Unmap().WithZone("")
		if err := d.Guard.Check(a, allow); err != nil {
			return nil, denied("host %s resolves to %s, which is protected: %s",
				host, a, errdefs.Message(err))
		}
		if !containsAddr(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, errdefs.Unavailable("host %s has no address", host)
	}
	return addrs, nil
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, b := range list {
		if a == b {
			return true
		}
	}
	return false
}

// DialChecked resolves and checks host (see Resolve), then connects to port on the
// checked addresses in turn, and returns the connection and the address it reached.
func (d *Dialer) DialChecked(ctx context.Context, host string, port int, allow []netip.Prefix) (net.Conn, netip.AddrPort, error) {
	addrs, err := d.Resolve(ctx, host, allow)
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	dial := d.Dial
	if dial == nil {
		dial = d.netDial(allow)
	}
	timeout := d.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	var errs []error
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, uint16(port))
		actx, cancel := context.WithTimeout(ctx, timeout)
		conn, err := dial(actx, "tcp", ap.String())
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ta, ok := conn.RemoteAddr().(*net.TCPAddr); ok && ta.AddrPort().Addr().Unmap() != a {
			conn.Close()
			return nil, netip.AddrPort{}, denied("connected to %s, not to the checked %s", ta, a)
		}
		return conn, ap, nil
	}
	return nil, netip.AddrPort{}, &errdefs.Error{Class: errdefs.ErrUnavailable,
		Msg: "cannot connect to " + net.JoinHostPort(host, strconv.Itoa(port)), Cause: errors.Join(errs...)}
}

// netDial is the default Dial: the kernel's socket address is checked once more right
// before connect, in the dialer itself.
func (d *Dialer) netDial(allow []netip.Prefix) func(context.Context, string, string) (net.Conn, error) {
	nd := &net.Dialer{
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return denied("cannot check the address %q", address)
			}
			if err := d.Guard.Check(ap.Addr().Unmap(), allow); err != nil {
				return err
			}
			if d.AtConnect != nil {
				return d.AtConnect(address)
			}
			return nil
		},
	}
	return nd.DialContext
}
