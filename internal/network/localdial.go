package network

import (
	"errors"
	"net/netip"

	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The proxy's Guard knows the node's own addresses as they were when the node started
// (nodeAddrs). An address the node gains later, such as a DHCP lease that changes, an IPv6 SLAAC
// or temporary address (those rotate), a new interface, or an AnyIP local route, would be
// merely public to it, and a sandbox whose policy reaches the internet could reach the
// node's own services there through the proxy or its relay. So the proxy's dials ask
// the kernel at every connect whether a public destination is local (checkNotLocal).

// proxyDialer is the proxy's dialer: the Guard's list of the node's addresses is the
// one of now, and each connect asks the kernel about addresses the node gained since.
func proxyDialer(guard egress.Guard, res egress.Resolver) *egress.Dialer {
	known := guard.Node
	return &egress.Dialer{Guard: guard, Resolver: res,
		AtConnect: func(address string) error { return checkNotLocal(address, known, kernelIsLocal) }}
}

// checkNotLocal is the proxy dial's check at connect time (egress.Dialer.AtConnect),
// after the Guard's: it refuses a destination isLocal says is the node's own, unless the
// Guard already knew it (known: the node's addresses at start, which the Guard makes
// Private) or it is not public at all (then the Guard's fixed ranges and the policy
// decided it).
func checkNotLocal(address string, known []netip.Prefix, isLocal func(netip.Addr) (bool, error)) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &errdefs.Error{Class: errdefs.ErrPermissionDenied, Msg: "egress refused: cannot check the address " + address}
	}
	a := ap.Addr().Unmap().WithZone("")
	if c, _ := egress.Classify(a); c != egress.Public {
		return nil
	}
	for _, p := range known {
		if p.Contains(a) {
			return nil
		}
	}
	local, err := isLocal(a)
	if err != nil {
		return &errdefs.Error{Class: errdefs.ErrPermissionDenied, Msg: "egress refused: cannot tell whether " + a.String() + " is the node's own address", Cause: err}
	}
	if local {
		return &errdefs.Error{Class: errdefs.ErrPermissionDenied, Msg: "egress refused: " + a.String() + " is the node's own address"}
	}
	return nil
}

// kernelIsLocal reports whether the kernel (in the calling thread's network namespace)
// would deliver a packet to a locally: a route of type local, which every address of the
// node has, AnyIP ranges included.
func kernelIsLocal(a netip.Addr) (bool, error) {
	routes, err := netlink.RouteGet(a.AsSlice())
	if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) {
		return false, nil // no route at all: not local, and the connect fails anyway
	}
	if err != nil {
		return false, err
	}
	for _, r := range routes {
		if r.Type == unix.RTN_LOCAL {
			return true, nil
		}
	}
	return false, nil
}
