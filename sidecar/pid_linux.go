//go:build linux

package sidecar

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// peerCred returns the credentials the process at the other end of a unix
// socket connection had when it connected: pid, uid and gid (SO_PEERCRED;
// pid 0 when not visible, e.g. another pid namespace) and its
// supplementary groups (SO_PEERGROUPS, Linux ≥ 4.13; else not known).
func peerCred(c net.Conn) peer {
	if pc, ok := c.(*peerConn); ok {
		return pc.p
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return peer{}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return peer{}
	}
	var p peer
	if err := raw.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			return
		}
		p = peer{pid: cred.Pid, uid: cred.Uid, gid: cred.Gid, known: true}
		if gs, err := peerGroups(int(fd)); err == nil {
			p.groups, p.groupsKnown = gs, true
		}
	}); err != nil {
		return peer{}
	}
	return p
}

// pollInterval is how often the fallback checks /proc/<pid> when pidfd_open
// is not available (Linux < 5.3, or seccomp).
const pollInterval = 200 * time.Millisecond

// newExitWaiter uses a pidfd (pidfd_open, Linux ≥ 5.3) registered with Go's
// network poller, so an exit is seen at once and no thread blocks; without
// pidfd it polls /proc/<pid> every 200 ms.
func newExitWaiter(pid int, log *slog.Logger) exitWaiter {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.EINVAL) { // kernels 5.3–5.9 know no flags
		fd, err = unix.PidfdOpen(pid, 0)
		if err == nil {
			err = unix.SetNonblock(fd, true)
			if err != nil {
				unix.Close(fd)
			}
		}
	}
	switch {
	case err == nil:
		return &pidfdWaiter{f: os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", pid)), pid: pid, log: log}
	case errors.Is(err, unix.ESRCH):
		return exitedWaiter{}
	}
	log.Debug("pidfd_open unavailable; polling /proc for the caller's exit", "pid", pid, "err", err)
	return newPollWaiter(pid)
}

type exitedWaiter struct{}

func (exitedWaiter) wait() bool { return true }
func (exitedWaiter) stop()      {}

type pidfdWaiter struct {
	f       *os.File
	pid     int
	log     *slog.Logger
	mu      sync.Mutex
	stopped bool
	poll    *pollWaiter // set when the poller would not take the pidfd
}

func (w *pidfdWaiter) wait() bool {
	rc, err := w.f.SyscallConn()
	if err == nil {
		err = rc.Read(func(fd uintptr) bool {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, perr := unix.Poll(fds, 0)
			return perr == nil && n > 0
		})
		if err == nil {
			return true
		}
	}
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return false
	}
	// Not pollable here: fall back to /proc.
	w.log.Debug("pidfd not pollable; polling /proc for the caller's exit", "pid", w.pid, "err", err)
	w.poll = newPollWaiter(w.pid)
	p := w.poll
	w.mu.Unlock()
	return p.wait()
}

func (w *pidfdWaiter) stop() {
	w.mu.Lock()
	w.stopped = true
	p := w.poll
	w.mu.Unlock()
	w.f.Close() // wakes a pending Read
	if p != nil {
		p.stop()
	}
}

type pollWaiter struct {
	pid  int
	quit chan struct{}
	once sync.Once
}

func newPollWaiter(pid int) *pollWaiter { return &pollWaiter{pid: pid, quit: make(chan struct{})} }

func (w *pollWaiter) wait() bool {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		if !alive(w.pid) {
			return true
		}
		select {
		case <-w.quit:
			return false
		case <-t.C:
		}
	}
}

func (w *pollWaiter) stop() { w.once.Do(func() { close(w.quit) }) }

// alive reports whether pid names a running (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// state is the field after the parenthesised command name
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}
