//go:build linux

package main

import "syscall"

// childAttr puts CMD in its own process group (so a loss or a forwarded
// signal reaches everything it started) and has the kernel SIGKILL it if
// baton lock dies without stopping it: the sidecar releases the lease of a
// process that exits, so CMD must not outlive it. (The parent-death signal
// reaches CMD itself, not its children.)
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
