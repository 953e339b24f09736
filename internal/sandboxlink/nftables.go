package sandboxlink

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The nftables layout, one "inet airlock" table in the host namespace. Sandboxes are
// elements of two sets, so adding or removing one never rewrites a chain:
//
//	set sandbox_ifs   { type ifname; }                          # host-side veth
//	set sandbox_links { type ifname . ipv4_addr . ipv4_addr; }  # veth . sandbox . host address
//	(every element carries its sandbox id as comment, which is how List finds it)
//	set sandbox_rate  { type ifname; size 65536; flags dynamic,timeout; timeout 1m; }
//	ct timeout sandbox_tcp { protocol tcp; policy = flowTimeouts (closing states short) }
//	ct timeout sandbox_udp { protocol udp; policy = { unreplied: 10, replied: 30 } }
//
//	chain prerouting { type nat hook prerouting priority dstnat
//	  iifname . ip saddr . ip daddr @sandbox_links udp dport 53 redirect to :DNSPort
//	  iifname . ip saddr . ip daddr @sandbox_links tcp dport 53 redirect to :DNSPort
//	  meta nfproto ipv4 iifname @sandbox_ifs tcp dport 80  redirect to :TransparentHTTPPort
//	  meta nfproto ipv4 iifname @sandbox_ifs tcp dport 443 redirect to :TransparentTLSPort
//	  iifname . ip saddr . ip daddr @sandbox_links accept
//	  meta nfproto ipv4 iifname @sandbox_ifs tcp redirect to :TransparentTCPPort }
//	chain input   { type filter hook input priority filter
//	  iifname @sandbox_ifs goto sandbox_in
//	  ct state new socket mark ListenerMark drop }   # the node's own mark (mark.go)
//	chain sandbox_in {
//	  ct state established,related accept
//	  ct state new update @sandbox_rate { iifname limit rate over NewFlowRate/second burst 2×NewFlowRate packets } drop
//	  ct state new limit rate over NodeNewFlowRate/second burst 2×NodeNewFlowRate packets drop
//	  ct state new meta l4proto tcp ct timeout set "sandbox_tcp"
//	  ct state new meta l4proto udp ct timeout set "sandbox_udp"
//	  iifname . ip saddr . ip daddr @sandbox_links tcp dport ProxyPort accept
//	  iifname . ip saddr . ip daddr @sandbox_links tcp dport DNSPort accept
//	  iifname . ip saddr . ip daddr @sandbox_links udp dport DNSPort accept
//	  iifname . ip saddr . ip daddr @sandbox_links tcp dport TransparentHTTPPort ct status dnat accept
//	  iifname . ip saddr . ip daddr @sandbox_links tcp dport TransparentTLSPort ct status dnat accept
//	  iifname . ip saddr . ip daddr @sandbox_links tcp dport TransparentTCPPort ct status dnat accept
//	  goto sandbox_reject }
//	chain forward { type filter hook forward priority filter
//	  iifname @sandbox_ifs goto sandbox_reject
//	  oifname @sandbox_ifs drop }
//	chain output  { type filter hook output priority filter
//	  oifname @sandbox_ifs ct state established,related accept
//	  oifname @sandbox_ifs drop }
//	chain sandbox_reject {
//	  meta l4proto tcp reject with tcp reset
//	  reject with icmpx admin-prohibited }
//
// "redirect" rewrites the destination to the first address of the interface the packet
// came in on, which is the link's host address. So a sandbox's TCP goes to the proxy
// whatever its destination (the proxy decides it), UDP only to DNS, and nothing else
// anywhere. The base chains accept by default, so the table never touches traffic of
// other interfaces, except that no other interface may open a connection to the proxy's
// and DNS server's sockets: they serve sandboxes only. Those sockets carry the node's
// ListenerMark (SO_MARK), and the rule matches the socket a packet would reach, not a port number:
// the table outlives the daemon (sandboxes keep their rules across a restart), and a
// rule naming ports would then black-hole whatever other program later got one of them.
// Rejecting (rather than dropping) makes a forbidden connection fail at once inside the
// sandbox instead of hanging.
//
// Every flow a sandbox opens to the node is an entry in the host's one connection-
// tracking table, and a full table drops new flows host-wide. A flow that is refused
// never enters it (an entry is confirmed only once its first packet is accepted); the
// ones that are accepted are bounded by the two rates, per sandbox and for the node,
// and by the timeouts sandbox_tcp and sandbox_udp give them once they close (10 s in
// TIME_WAIT instead of the host's 120 s). A packet over a rate is dropped rather than
// rejected: the client retries its SYN or query a moment later, as it would on a
// congested link, and a flooding sandbox gets no replies to make the host send.
const (
	tableName   = "airlock"
	setIfs      = "sandbox_ifs"
	setLinks    = "sandbox_links"
	setRate     = "sandbox_rate"
	chainIn     = "sandbox_in"
	chainReject = "sandbox_reject"
	timeoutTCP  = "sandbox_tcp"
	timeoutUDP  = "sandbox_udp"
)

// flowTimeouts are the conntrack timeouts, in seconds, of a sandbox's TCP flows by
// state. An open connection keeps the host's own timeout (the listeners' caps bound how
// many there are); the states a closing or never-answered flow passes through are short.
var flowTimeouts = expr.CtStatePolicyTimeout{
	expr.CtStateTCPSYNSENT:     10,
	expr.CtStateTCPSYNRECV:     10,
	expr.CtStateTCPESTABLISHED: 432000,
	expr.CtStateTCPFINWAIT:     60,
	expr.CtStateTCPCLOSEWAIT:   60,
	expr.CtStateTCPLASTACK:     30,
	expr.CtStateTCPTIMEWAIT:    10,
	expr.CtStateTCPCLOSE:       10,
	expr.CtStateTCPSYNSENT2:    10,
	expr.CtStateTCPRETRANS:     60,
	expr.CtStateTCPUNACK:       60,
}

// ctTimeoutMu serialises the marshalling of CtTimeout objects (see ensureTable).
var ctTimeoutMu sync.Mutex

// udpTimeouts are those of a sandbox's UDP flows, which are DNS queries: one answer
// each.
var udpTimeouts = expr.CtStatePolicyTimeout{expr.CtStateUDPUNREPLIED: 10, expr.CtStateUDPREPLIED: 30}

var linkKeyType = nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIPAddr, nftables.TypeIPAddr)

func (m *Manager) table() *nftables.Table {
	name := m.cfg.Table
	if name == "" {
		name = tableName
	}
	return &nftables.Table{Family: nftables.TableFamilyINet, Name: name}
}

func sets(t *nftables.Table) (ifs, links *nftables.Set) {
	// ifname is a host-order type: saying so lets `nft list` print the names.
	return &nftables.Set{Table: t, Name: setIfs, KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian},
		&nftables.Set{Table: t, Name: setLinks, KeyType: linkKeyType, Concatenation: true}
}

func (m *Manager) nft() (*nftables.Conn, error) {
	c, err := nftables.New(nftables.WithNetNSFd(int(m.hostNS)))
	if err != nil {
		return nil, fmt.Errorf("netns: nftables: %w", err)
	}
	return c, nil
}

// ensureTable creates the table, its sets and chains if missing and (re)writes every
// chain's rules, all in one transaction. Set elements, the sandboxes, are kept, and
// those of restore are (re)added in the same transaction.
func (m *Manager) ensureTable(restore ...*Sandbox) error {
	c, err := m.nft()
	if err != nil {
		return err
	}
	t := c.AddTable(m.table())
	ifs, links := sets(t)
	if err := c.AddSet(ifs, nil); err != nil {
		return fmt.Errorf("netns: nftables set %s: %w", setIfs, err)
	}
	if err := c.AddSet(links, nil); err != nil {
		return fmt.Errorf("netns: nftables set %s: %w", setLinks, err)
	}
	rate := &nftables.Set{Table: t, Name: setRate, KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian,
		Dynamic: true, HasTimeout: true, Timeout: time.Minute, Size: 1 << 16}
	if err := c.AddSet(rate, nil); err != nil {
		return fmt.Errorf("netns: nftables set %s: %w", setRate, err)
	}
	// An existing object is kept as it is (objects of this type cannot be updated); the
	// policies are constants. Marshalling a CtTimeout writes the policy into the
	// library's package-level default map, hence the lock.
	ctTimeoutMu.Lock()
	defer ctTimeoutMu.Unlock()
	c.AddObj(&nftables.NamedObj{Table: t, Name: timeoutTCP, Type: nftables.ObjTypeCtTimeout,
		Obj: &expr.CtTimeout{L3Proto: unix.NFPROTO_IPV4, L4Proto: unix.IPPROTO_TCP, Policy: maps.Clone(flowTimeouts)}})
	c.AddObj(&nftables.NamedObj{Table: t, Name: timeoutUDP, Type: nftables.ObjTypeCtTimeout,
		Obj: &expr.CtTimeout{L3Proto: unix.NFPROTO_IPV4, L4Proto: unix.IPPROTO_UDP, Policy: maps.Clone(udpTimeouts)}})
	accept := nftables.ChainPolicyAccept
	chain := func(name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
		ch := &nftables.Chain{Table: t, Name: name}
		if hook != nil {
			ch.Type, ch.Hooknum, ch.Priority, ch.Policy = typ, hook, prio, &accept
		}
		ch = c.AddChain(ch)
		c.FlushChain(ch)
		return ch
	}
	reject := chain(chainReject, "", nil, nil)
	in := chain(chainIn, "", nil, nil)
	pre := chain("prerouting", nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest)
	input := chain("input", nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter)
	fwd := chain("forward", nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter)
	out := chain("output", nftables.ChainTypeFilter, nftables.ChainHookOutput, nftables.ChainPriorityFilter)

	cfg := m.cfg
	perSandbox, perNode := cfg.flowRates()
	type rule struct {
		ch *nftables.Chain
		e  []expr.Any
	}
	rules := []rule{
		{pre, cat(inLinks(links), l4(unix.IPPROTO_UDP), dport(53), redirect(cfg.DNSPort))},
		{pre, cat(inLinks(links), l4(unix.IPPROTO_TCP), dport(53), redirect(cfg.DNSPort))},
		{pre, cat(ipv4(), ifIn(expr.MetaKeyIIFNAME, ifs), l4(unix.IPPROTO_TCP), dport(80), redirect(cfg.TransparentHTTPPort))},
		{pre, cat(ipv4(), ifIn(expr.MetaKeyIIFNAME, ifs), l4(unix.IPPROTO_TCP), dport(443), redirect(cfg.TransparentTLSPort))},
		{pre, cat(inLinks(links), verdict(expr.VerdictAccept, ""))},
		{pre, cat(ipv4(), ifIn(expr.MetaKeyIIFNAME, ifs), l4(unix.IPPROTO_TCP), redirect(cfg.TransparentTCPPort))},

		{input, cat(ifIn(expr.MetaKeyIIFNAME, ifs), verdict(expr.VerdictGoto, chainIn))},

		{in, cat(ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept, ""))},
		{in, cat(ctState(expr.CtStateBitNEW), overRatePerIf(rate, perSandbox), verdict(expr.VerdictDrop, ""))},
		{in, cat(ctState(expr.CtStateBitNEW), []expr.Any{limitOver(perNode)}, verdict(expr.VerdictDrop, ""))},
		{in, cat(ctState(expr.CtStateBitNEW), l4(unix.IPPROTO_TCP), ctTimeout(timeoutTCP))},
		{in, cat(ctState(expr.CtStateBitNEW), l4(unix.IPPROTO_UDP), ctTimeout(timeoutUDP))},
		{in, cat(inLinks(links), l4(unix.IPPROTO_TCP), dport(cfg.ProxyPort), verdict(expr.VerdictAccept, ""))},
		{in, cat(inLinks(links), l4(unix.IPPROTO_TCP), dport(cfg.DNSPort), verdict(expr.VerdictAccept, ""))},
		{in, cat(inLinks(links), l4(unix.IPPROTO_UDP), dport(cfg.DNSPort), verdict(expr.VerdictAccept, ""))},
		{in, cat(inLinks(links), l4(unix.IPPROTO_TCP), dport(cfg.TransparentHTTPPort), ctDNAT(), verdict(expr.VerdictAccept, ""))},
		{in, cat(inLinks(links), l4(unix.IPPROTO_TCP), dport(cfg.TransparentTLSPort), ctDNAT(), verdict(expr.VerdictAccept, ""))},
		{in, cat(inLinks(links), l4(unix.IPPROTO_TCP), dport(cfg.TransparentTCPPort), ctDNAT(), verdict(expr.VerdictAccept, ""))},
		{in, verdict(expr.VerdictGoto, chainReject)},

		{fwd, cat(ifIn(expr.MetaKeyIIFNAME, ifs), verdict(expr.VerdictGoto, chainReject))},
		{fwd, cat(ifIn(expr.MetaKeyOIFNAME, ifs), verdict(expr.VerdictDrop, ""))},

		{out, cat(ifIn(expr.MetaKeyOIFNAME, ifs), ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept, ""))},
		{out, cat(ifIn(expr.MetaKeyOIFNAME, ifs), verdict(expr.VerdictDrop, ""))},

		{reject, cat(l4(unix.IPPROTO_TCP), []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}})},
		{reject, []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}}},
	}
	counts := map[string]int{}
	for _, r := range rules {
		c.AddRule(&nftables.Rule{Table: t, Chain: r.ch, Exprs: r.e})
		counts[r.ch.Name]++
	}
	// Last in input, after the goto for sandboxes; its comment names the mark for the
	// other nodes on the host to read (ReserveMark).
	c.AddRule(&nftables.Rule{Table: t, Chain: input, UserData: markComment(cfg.ListenerMark),
		Exprs: cat(ctState(expr.CtStateBitNEW), socketMark(cfg.ListenerMark), verdict(expr.VerdictDrop, ""))})
	counts[input.Name]++
	// The elements go in batches: one transaction of thousands of sandboxes' elements
	// is more than a netlink message may hold (EMSGSIZE), and the whole rewrite failed.
	// Existing elements stay while chains are flushed and rules written again, and a
	// batch re-adding an element already there changes nothing, so the batches after
	// the first only add what was missing.
	first := restore[:min(len(restore), elementBatch)]
	if err := setElements(c, ifs, links, first...); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("netns: nftables table %s: %w", m.table().Name, err)
	}
	m.ruleCounts = counts
	for rest := restore[len(first):]; len(rest) > 0; rest = rest[min(len(rest), elementBatch):] {
		if err := setElements(c, ifs, links, rest[:min(len(rest), elementBatch)]...); err != nil {
			return err
		}
		if err := c.Flush(); err != nil {
			return fmt.Errorf("netns: nftables elements of table %s: %w", m.table().Name, err)
		}
	}
	return nil
}

// elementBatch is how many sandboxes' elements one nftables transaction adds at most
// (two elements each, well within a netlink message).
const elementBatch = 256

// addElements admits sandbox sb to the rules: one element in each set, one transaction.
func (m *Manager) addElements(sb *Sandbox) error {
	c, err := m.nft()
	if err != nil {
		return err
	}
	ifs, links := sets(m.table())
	if err := setElements(c, ifs, links, sb); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("netns: nftables elements of %s: %w", sb.ID, err)
	}
	return nil
}

// setElements queues the sandboxes' element in each set on c: one message a set.
func setElements(c *nftables.Conn, ifs, links *nftables.Set, sbs ...*Sandbox) error {
	if len(sbs) == 0 {
		return nil
	}
	ie, le := make([]nftables.SetElement, len(sbs)), make([]nftables.SetElement, len(sbs))
	for i, sb := range sbs {
		ie[i] = nftables.SetElement{Key: ifKey(sb.HostIf), Comment: sb.ID}
		le[i] = nftables.SetElement{Key: linkKey(sb.HostIf, sb.SandboxAddr, sb.HostAddr), Comment: sb.ID}
	}
	if err := c.SetAddElements(ifs, ie); err != nil {
		return err
	}
	return c.SetAddElements(links, le)
}

// element is one set element with the set it is in.
type element struct {
	set *nftables.Set
	nftables.SetElement
}

// elements returns the elements of both sets.
func (m *Manager) elements() ([]element, error) {
	c, err := m.nft()
	if err != nil {
		return nil, err
	}
	ifs, links := sets(m.table())
	var out []element
	for _, s := range []*nftables.Set{ifs, links} {
		elems, err := c.GetSetElements(s)
		if err != nil {
			return nil, fmt.Errorf("netns: nftables set %s: %w", s.Name, err)
		}
		for _, e := range elems {
			out = append(out, element{s, e})
		}
	}
	return out, nil
}

// deleteElements removes the elements of sandbox id (those with its id as comment),
// in one transaction; none is not an error. elems are both sets' elements, read by the
// caller, or nil to read them here (reading them is the cost of a delete, which grows
// with the node's sandboxes: a caller that already has them passes them).
func (m *Manager) deleteElements(id string, elems []element) error {
	if elems == nil {
		var err error
		if elems, err = m.elements(); err != nil {
			return err
		}
	}
	c, err := m.nft()
	if err != nil {
		return err
	}
	for _, e := range elems {
		if e.Comment == id {
			if err := c.SetDeleteElements(e.set, []nftables.SetElement{{Key: e.Key}}); err != nil {
				return err
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("netns: nftables elements of %s: %w", id, err)
	}
	return nil
}

// ifName is the interface name at the start of a set key.
func (e element) ifName() string {
	return string(bytes.TrimRight(e.Key[:min(len(e.Key), unix.IFNAMSIZ)], "\x00"))
}

// ifKey is an ifname set key: the name, zero-padded to IFNAMSIZ.
func ifKey(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

func linkKey(hostIf string, sandbox, host netip.Addr) []byte {
	s, h := sandbox.As4(), host.As4()
	return append(append(ifKey(hostIf), s[:]...), h[:]...)
}

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func ipv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

// inLinks matches IPv4 packets whose input interface, source and destination address
// are one sandbox's link: its veth, its own address, its host address.
func inLinks(links *nftables.Set) []expr.Any {
	// A concatenation lives in consecutive 32-bit registers: the 16-byte name in 8-11,
	// the addresses in 12 and 13.
	return cat(ipv4(), []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 8},
		&expr.Payload{DestRegister: 12, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Payload{DestRegister: 13, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 8, SetName: links.Name, SetID: links.ID},
	})
}

func ifIn(key expr.MetaKey, ifs *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: ifs.Name, SetID: ifs.ID},
	}
}

func l4(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

func dport(port int) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: be16(port)},
	}
}

// socketMark matches packets whose local socket (the one they would be delivered to)
// has SO_MARK mark.
func socketMark(mark uint32) []expr.Any {
	return []expr.Any{
		&expr.Socket{Key: expr.SocketKeyMark, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(mark)},
	}
}

func ctState(bits uint32) []expr.Any { return ctBits(expr.CtKeySTATE, bits) }

// ctDNAT matches connections whose destination was rewritten (ct status dnat), i.e.
// that came through a redirect rule rather than straight to the port.
func ctDNAT() []expr.Any { return ctBits(expr.CtKeySTATUS, ipsDstNAT) }

// ipsDstNAT is IPS_DST_NAT of linux/netfilter/nf_conntrack_common.h.
const ipsDstNAT = 1 << 5

func ctBits(key expr.CtKey, bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: key, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binary.NativeEndian.AppendUint32(nil, bits), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

func redirect(port int) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: be16(port)},
		&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
	}
}

// limitOver matches while packets come faster than rate a second, beyond a burst of
// twice that.
func limitOver(rate int) *expr.Limit {
	return &expr.Limit{Type: expr.LimitTypePkts, Rate: uint64(rate), Unit: expr.LimitTimeSecond, Burst: uint32(2 * rate), Over: true}
}

// overRatePerIf matches while packets come in on their interface faster than rate a
// second: one limit per interface, kept in the dynamic set (an element expires a
// minute after its interface's last new flow).
func overRatePerIf(set *nftables.Set, rate int) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Dynset{SrcRegKey: 1, SetName: set.Name, SetID: set.ID, Operation: unix.NFT_DYNSET_OP_UPDATE,
			Exprs: []expr.Any{limitOver(rate)}},
	}
}

// ctTimeout gives the packet's (new, not yet confirmed) flow the named timeout policy.
func ctTimeout(name string) []expr.Any {
	return []expr.Any{&expr.Objref{Type: int(nftables.ObjTypeCtTimeout), Name: name}}
}

func verdict(kind expr.VerdictKind, chain string) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: kind, Chain: chain}}
}

func be16(port int) []byte { return binary.BigEndian.AppendUint16(nil, uint16(port)) }
