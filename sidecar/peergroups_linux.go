//go:build linux && !386

package sidecar

import (
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// peerGroups returns the supplementary groups the peer of the unix socket
// fd had when it connected (SO_PEERGROUPS, Linux ≥ 4.13).
func peerGroups(fd int) ([]uint32, error) {
	var small [64]uint32
	buf := small[:]
	for {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch {
		case e == unix.ERANGE && int(n/4) > len(buf):
			buf = make([]uint32, n/4)
			continue
		case e != 0:
			return nil, e
		}
		// kept with the connection for its life: its own size, not the
		// buffer's (256 bytes for the usual one or two groups)
		return slices.Clone(buf[:n/4]), nil
	}
}
