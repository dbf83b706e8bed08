//go:build linux && race

package rawio

import "syscall"

const enabled = true

// Under the race detector read and write are syscall's (with entersyscall):
// its happens-before through sockets (syscall's ioSync annotations) is kept,
// and the rest of this package runs as in production.
func read(fd uintptr, p []byte) (int, syscall.Errno) { return errno(syscall.Read(int(fd), p)) }

func write(fd uintptr, p []byte) (int, syscall.Errno) { return errno(syscall.Write(int(fd), p)) }

func errno(n int, err error) (int, syscall.Errno) {
	if err != nil {
		e, _ := err.(syscall.Errno)
		return 0, e
	}
	return n, 0
}
