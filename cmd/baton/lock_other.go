//go:build unix && !linux

package main

import "syscall"

// childAttr puts CMD in its own process group, so a loss or a forwarded
// signal reaches everything it started. (No parent-death signal here: if
// baton lock is killed, CMD goes on without the lock.)
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
