package sidecar

import (
	"context"
	"os"
	"sync"

	"github.com/batonhq/baton/api"
)

// pidKey carries the caller's pid (SO_PEERCRED) in a connection's context.
type pidKey struct{}

func pidFrom(ctx context.Context) int32 {
	pid, _ := ctx.Value(pidKey{}).(int32)
	return pid
}

// pidWatch follows one caller process: when it exits, its leases are
// released at once. One watch per pid with leases.
type pidWatch struct {
	pid      int32
	leases   map[string]*lease // guarded by Server.mu
	w        exitWaiter
	stopOnce sync.Once
}

func (pw *pidWatch) stop() { pw.stopOnce.Do(pw.w.stop) }

// exitWaiter waits for a process to exit.
type exitWaiter interface {
	// wait blocks until the process exits (true) or stop is called (false).
	wait() bool
	stop()
}

// watchPIDLocked adds l to its process's watch, starting one if needed.
// Leases of the sidecar's own process (in-process clients) and of callers
// whose pid is not visible (another pid namespace: 0) rely on the lease
// alone. s.mu must be held.
func (s *Server) watchPIDLocked(l *lease) {
	if l.pid <= 0 || int(l.pid) == os.Getpid() {
		return
	}
	pw := s.pids[l.pid]
	if pw == nil {
		pw = &pidWatch{pid: l.pid, leases: map[string]*lease{}, w: newExitWaiter(int(l.pid), s.log)}
		s.pids[l.pid] = pw
		s.wg.Add(1)
		go s.runPIDWatch(pw)
	}
	pw.leases[l.id] = l
	l.pw = pw
}

func (s *Server) runPIDWatch(pw *pidWatch) {
	defer s.wg.Done()
	if !pw.w.wait() {
		return
	}
	s.mu.Lock()
	if s.pids[pw.pid] == pw {
		delete(s.pids, pw.pid)
	}
	ls := make([]*lease, 0, len(pw.leases))
	for _, l := range pw.leases {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	pw.stop()
	for _, l := range ls {
		if s.finishLease(l, api.StateLost, api.ReasonProcessExited, "the process that acquired the lease exited", nil) {
			s.releaseGrant(l.g)
		}
	}
}
