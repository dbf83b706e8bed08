//go:build linux && !race && !386

package rawio

import (
	"syscall"
	"unsafe"
)

const enabled = true

// read and write skip entersyscall (see the package comment). They ask for
// a non-blocking call themselves (MSG_DONTWAIT) instead of relying on the
// socket's O_NONBLOCK: a raw call that blocked would hold its P, and the
// next stop-the-world (a collection) would wait for it forever. A write to
// a caller that left fails with EPIPE without raising SIGPIPE
// (MSG_NOSIGNAL).
func read(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), syscall.MSG_DONTWAIT, 0, 0)
	return int(n), e
}

func write(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), syscall.MSG_DONTWAIT|syscall.MSG_NOSIGNAL, 0, 0)
	return int(n), e
}
