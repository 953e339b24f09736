package sandboxlink

import (
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// OriginalDst returns where a connection accepted on a transparent port was headed
// before the redirect rule rewrote it (SO_ORIGINAL_DST, read from conntrack). For a
// connection that was not redirected it returns the local address, or an error if
// conntrack has no entry.
func OriginalDst(conn *net.TCPConn) (netip.AddrPort, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	local, _ := netip.ParseAddrPort(conn.LocalAddr().String())
	var dst netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		if local.Addr().Unmap().Is4() {
			var sa unix.RawSockaddrInet4
			if serr = getsockopt(fd, unix.SOL_IP, unsafe.Pointer(&sa), unsafe.Sizeof(sa)); serr == nil {
				dst = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), ntohs(sa.Port))
			}
			return
		}
		var sa unix.RawSockaddrInet6
		if serr = getsockopt(fd, unix.SOL_IPV6, unsafe.Pointer(&sa), unsafe.Sizeof(sa)); serr == nil {
			dst = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), ntohs(sa.Port))
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("netns: original destination: %w", err)
	}
	return dst, nil
}

// getsockopt reads SO_ORIGINAL_DST (IP6T_SO_ORIGINAL_DST has the same number) into p.
func getsockopt(fd uintptr, level int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), unix.SO_ORIGINAL_DST,
		uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// ntohs reads a port stored in network byte order.
func ntohs(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}
