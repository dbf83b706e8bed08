//go:build linux

package main

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

// socketPeerPID returns the pid of the process at the other end of a unix
// socket connection (SO_PEERCRED): for a client, the process that listens.
// 0 when the kernel cannot map it into our pid namespace.
func socketPeerPID(c net.Conn) (int, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, errors.New("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if gerr != nil {
		return 0, gerr
	}
	return int(cred.Pid), nil
}
