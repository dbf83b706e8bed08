//go:build !linux || (386 && !race)

package rawio

import "syscall"

// enabled is false: New keeps the connection's own methods (elsewhere
// than Linux, and on linux/386, whose socket calls go through socketcall).
const enabled = false

func read(fd uintptr, p []byte) (int, syscall.Errno) { panic("rawio: not enabled") }

func write(fd uintptr, p []byte) (int, syscall.Errno) { panic("rawio: not enabled") }
