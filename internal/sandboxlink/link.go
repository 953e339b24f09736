package sandboxlink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	mnl "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// linkMTU is the MTU of both ends of a sandbox's link, as large as a loopback's. Every
// connection over it ends on the node (at the proxy, its relay or DNS), none is
// forwarded to a real network, so no packet has to fit anything smaller; and the
// node's network stack handles each byte a sandbox receives in fewer, larger packets.
const linkMTU = 65520

// addVeth creates sb's veth pair: the host side in the host namespace, labelled with
// the id in its alias (the kernel ignores an alias given at creation), the peer
// directly inside sb's namespace. Both stay down. On failure nothing is left.
func (m *Manager) addVeth(sb *Sandbox) error {
	ns, err := vnetns.GetFromPath(sb.NetnsPath)
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	defer ns.Close()
	attrs := netlink.NewLinkAttrs()
	attrs.Name = sb.HostIf
	attrs.MTU = linkMTU // both ends: the peer takes the host side's
	veth := &netlink.Veth{LinkAttrs: attrs, PeerName: sb.SandboxIf, PeerNamespace: netlink.NsFd(ns)}
	if err := m.nl.LinkAdd(veth); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return errdefs.Exists("netns: interface %s of sandbox %s already exists", sb.HostIf, sb.ID)
		}
		return fmt.Errorf("netns: add veth %s: %w", sb.HostIf, err)
	}
	if err := m.nl.LinkSetAlias(veth, aliasPrefix+sb.ID); err != nil {
		return errors.Join(fmt.Errorf("netns: label %s: %w", sb.HostIf, err), m.delLink(sb.HostIf))
	}
	return nil
}

// setupLink addresses both ends, brings them up, routes everything in the sandbox via
// the host side and waits until both ends can send.
func (m *Manager) setupLink(ctx context.Context, sb *Sandbox) error {
	ns, err := vnetns.GetFromPath(sb.NetnsPath)
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netns: netlink in %s: %w", sb.NetnsPath, err)
	}
	defer h.Close()
	bits := m.cfg.linkBits()
	peer, err := h.LinkByName(sb.SandboxIf)
	if err == nil {
		err = h.AddrAdd(peer, ipNet(sb.SandboxAddr, bits))
	}
	if err == nil {
		err = h.LinkSetUp(peer)
	}
	if err == nil {
		err = h.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: sb.HostAddr.AsSlice()})
	}
	if err != nil {
		return fmt.Errorf("netns: sandbox side of %s: %w", sb.ID, err)
	}
	host, err := m.nl.LinkByName(sb.HostIf)
	if err == nil {
		err = m.nl.AddrAdd(host, ipNet(sb.HostAddr, bits))
	}
	if err == nil {
		err = m.nl.LinkSetUp(host)
	}
	if err != nil {
		return fmt.Errorf("netns: host side of %s: %w", sb.ID, err)
	}
	if err := waitActive(ctx, ns, peer.Attrs().Index); err != nil {
		return err
	}
	return waitActive(ctx, m.hostNS, host.Attrs().Index)
}

// readyTimeout bounds how long Create waits for the kernel to activate a link.
const readyTimeout = 5 * time.Second

// waitActive returns once interface index of namespace ns can send. After carrier-on
// the kernel attaches the interface's queueing discipline asynchronously (linkwatch);
// until then the link drops every packet, the sandbox's first ARP request included,
// which would stall its first connection for a second. It waits for link events
// rather than polling.
func waitActive(ctx context.Context, ns vnetns.NsHandle, index int) error {
	c, err := mnl.Dial(unix.NETLINK_ROUTE, &mnl.Config{NetNS: int(ns), Groups: unix.RTMGRP_LINK})
	if err != nil {
		return fmt.Errorf("netns: link events: %w", err)
	}
	defer c.Close()
	deadline := time.Now().Add(readyTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := c.SetReadDeadline(deadline); err != nil {
		return fmt.Errorf("netns: link events: %w", err)
	}
	// Ask for the current state only now that events are subscribed, so none is missed.
	req := mnl.Message{Header: mnl.Header{Type: unix.RTM_GETLINK, Flags: mnl.Request}, Data: ifinfomsg(index)}
	if _, err := c.Send(req); err != nil {
		return fmt.Errorf("netns: link events: %w", err)
	}
	for {
		msgs, err := c.Receive()
		if err != nil {
			return fmt.Errorf("netns: waiting for interface %d to become active: %w", index, err)
		}
		for _, msg := range msgs {
			if msg.Header.Type == unix.RTM_NEWLINK && linkActive(msg.Data, index) {
				return nil
			}
		}
	}
}

func ifinfomsg(index int) []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	return b
}

// linkActive reports whether an RTM_NEWLINK message is about interface index and shows
// a queueing discipline other than "noop", the one of an inactive interface.
func linkActive(b []byte, index int) bool {
	if len(b) < unix.SizeofIfInfomsg || int(int32(binary.NativeEndian.Uint32(b[4:]))) != index {
		return false
	}
	ad, err := mnl.NewAttributeDecoder(b[unix.SizeofIfInfomsg:])
	if err != nil {
		return false
	}
	for ad.Next() {
		if ad.Type() == unix.IFLA_QDISC {
			return ad.String() != "noop"
		}
	}
	return false
}

// delLink deletes a host-side veth, and so its peer; a missing one is fine.
func (m *Manager) delLink(name string) error {
	l, err := m.nl.LinkByName(name)
	if errors.As(err, new(netlink.LinkNotFoundError)) {
		return nil
	}
	if err == nil {
		err = m.unlink(l)
	}
	if err != nil {
		return fmt.Errorf("netns: delete %s: %w", name, err)
	}
	return nil
}

// unlink deletes a link found a moment ago; one gone since is fine: a sandbox's pair
// goes with its namespace, on the kernel's own time, once the sandbox's last process
// has ended.
func (m *Manager) unlink(l netlink.Link) error {
	if err := m.nl.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return err
	}
	return nil
}

func ipNet(a netip.Addr, bits int) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}}
}
