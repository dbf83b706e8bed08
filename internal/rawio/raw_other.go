//go:build !linux

package rawio

import "syscall"

// enabled is false: New keeps the connection's own methods.
const enabled = false

func read(fd uintptr, p []byte) (int, syscall.Errno) { panic("rawio: not enabled") }

func write(fd uintptr, p []byte) (int, syscall.Errno) { panic("rawio: not enabled") }
