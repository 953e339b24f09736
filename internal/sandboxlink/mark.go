package sandboxlink

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Each node's proxy and DNS sockets carry a mark of the node's own (SO_MARK), and its
// table drops new connections to sockets with that mark from every interface but its
// sandboxes' veths. The mark is what lets several nodes share one host: a node's rule
// matches only its own listeners, so it never drops the connections another node's
// sandboxes open to theirs, and a table left by a node that stopped (tables outlive
// their daemon, so sandboxes keep their rules across a restart) matches no socket of
// a node running now. A node picks its mark when it starts, from its table's name,
// skipping the marks other tables on the host already match on; its own table is
// written again at every start, so the mark need not stay the same across restarts.
//
// The candidates are markBase with one of 256 values in the low byte: bits clear of
// the ones Kubernetes (0x4000, 0x8000), Calico and Cilium (0xffff0000, 0x0f00) and
// Tailscale (0xff0000) test in their routing marks, since the mark also rides on the
// listeners' replies to sandboxes.
const (
	markBase  = 0x1000
	markCount = 256
)

// markLockPath serialises the choice of marks between nodes starting at the same time
// on one host: held from the choice until the node's table names its mark.
var markLockPath = "/run/lock/airlock-nftables.lock"

// ReserveMark picks the listener mark of the node whose table is named table, in the
// network namespace at hostNetns ("" for the caller's own): the first mark, starting
// from one given by the name, that no other inet table there drops connections by.
// It holds a host-wide lock until release is called, which the caller does once New
// has written the table with the mark (Config.ListenerMark), so that two nodes
// starting together cannot pick the same one.
func ReserveMark(hostNetns, table string) (mark uint32, release func(), err error) {
	if table == "" {
		table = tableName
	}
	unlock, err := lockFile(markLockPath)
	if err != nil {
		return 0, nil, err
	}
	defer func() {
		if err != nil {
			unlock()
		}
	}()
	used, err := marksInUse(hostNetns, table)
	if err != nil {
		return 0, nil, err
	}
	h := fnv.New32a()
	h.Write([]byte(table))
	start := h.Sum32() % markCount
	for i := range uint32(markCount) {
		m := markBase | (start+i)%markCount
		if !used[m] {
			return m, unlock, nil
		}
	}
	return 0, nil, fmt.Errorf("netns: all %d listener marks are taken by other nftables tables on this host; "+
		"delete the tables of nodes that are gone (nft list tables)", markCount)
}

// marksInUse returns the socket marks the input chains of the inet tables other than
// skip match on, and legacyMark.
func marksInUse(hostNetns, skip string) (map[uint32]bool, error) {
	path := hostNetns
	if path == "" {
		path = "/proc/self/ns/net"
	}
	ns, err := vnetns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("netns: host namespace %s: %w", path, err)
	}
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return nil, fmt.Errorf("netns: nftables: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("netns: list nftables tables: %w", err)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("netns: list nftables chains: %w", err)
	}
	used := map[uint32]bool{legacyMark: true}
	for _, t := range tables {
		if t.Name == skip {
			continue
		}
		for _, ch := range chains {
			if ch.Table.Name != t.Name || ch.Hooknum == nil || *ch.Hooknum != *nftables.ChainHookInput {
				continue
			}
			rules, err := c.GetRules(t, ch)
			if err != nil {
				continue // gone meanwhile
			}
			for _, r := range rules {
				if m, ok := commentMark(r.UserData); ok {
					used[m] = true
				}
			}
		}
	}
	return used, nil
}

// OtherTables names the nftables tables of the caller's network namespace other than
// the inet table skip, as "family name", for messages that point at a likely cause.
func OtherTables(skip string) ([]string, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, err
	}
	tables, err := c.ListTables()
	if err != nil {
		return nil, err
	}
	fam := map[nftables.TableFamily]string{nftables.TableFamilyINet: "inet", nftables.TableFamilyIPv4: "ip",
		nftables.TableFamilyIPv6: "ip6", nftables.TableFamilyARP: "arp", nftables.TableFamilyBridge: "bridge",
		nftables.TableFamilyNetdev: "netdev"}
	var out []string
	for _, t := range tables {
		if t.Family == nftables.TableFamilyINet && t.Name == skip {
			continue
		}
		out = append(out, fam[t.Family]+" "+t.Name)
	}
	return out, nil
}

// The rule that matches a node's listener mark says which in its comment, for the
// other nodes to read: the library reading rules back does not decode socket
// expressions. Tables written before marks were per node used legacyMark and say
// nothing; it is never handed out.
const (
	markCommentFormat = "airlock listener mark %#x"
	markCommentScan   = "airlock listener mark %v" // %v takes the 0x
	legacyMark        = 0x10ac
)

func markComment(mark uint32) []byte {
	return userdata.AppendString(nil, userdata.TypeComment, fmt.Sprintf(markCommentFormat, mark))
}

// commentMark reads the mark from a rule's comment, if it has one of markComment's.
func commentMark(udata []byte) (uint32, bool) {
	s, ok := userdata.GetString(udata, userdata.TypeComment)
	if !ok {
		return 0, false
	}
	var m uint32
	if _, err := fmt.Sscanf(s, markCommentScan, &m); err != nil {
		return 0, false
	}
	return m, true
}

// lockFile takes an exclusive lock on path (made if missing) and returns its release.
func lockFile(path string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("netns: lock %s: %w", path, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("netns: lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// MarkSocket returns a Control for a net.ListenConfig that sets mark on a socket
// before it binds: the node's listeners for sandboxes carry the mark its table
// protects them by (Config.ListenerMark).
func MarkSocket(mark uint32) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(mark))
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("netns: mark the listening socket: %w", serr)
		}
		return nil
	}
}

// validMark reports whether m is one of the marks ReserveMark hands out.
func validMark(m uint32) bool { return m&^(markCount-1) == markBase }
