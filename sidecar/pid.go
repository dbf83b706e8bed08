package sidecar

import (
	"errors"
	"os"
	"sync"
	"time"

	"github.com/batonhq/baton/api"
)

// pidWatch follows one caller process: when it exits, its leases are
// released at once. One watch per pid with leases.
type pidWatch struct {
	pid      int32
	leases   map[string]*lease // guarded by Server.mu
	linger   *time.Timer       // guarded by Server.mu: stops an idle watch later
	holds    int               // guarded by Server.mu: acquires waiting with this watch (holdPID)
	exited   bool              // guarded by Server.mu: the process exited
	w        exitWaiter
	stopOnce sync.Once
}

// pidLinger keeps a process's watch after its last lease ends, so that a
// process locking in a loop does not open and close a pidfd (and wake a
// goroutine) per lock.
const pidLinger = 30 * time.Second

// idleLocked is called when pw's last lease ended. s.mu must be held.
func (s *Server) idleLocked(pw *pidWatch) {
	if s.closed {
		delete(s.pids, pw.pid)
		pw.stop()
		return
	}
	pw.linger = time.AfterFunc(pidLinger, func() {
		s.mu.Lock()
		idle := len(pw.leases) == 0 && pw.holds == 0 && s.pids[pw.pid] == pw
		if idle {
			delete(s.pids, pw.pid)
		}
		s.mu.Unlock()
		if idle {
			pw.stop()
		}
	})
}

// stopPIDsLocked stops every watch (teardown). s.mu must be held.
func (s *Server) stopPIDsLocked() {
	for pid, pw := range s.pids {
		if pw.linger != nil {
			pw.linger.Stop()
		}
		delete(s.pids, pid)
		pw.stop()
	}
}

func (pw *pidWatch) stop() { pw.stopOnce.Do(pw.w.stop) }

// exitWaiter waits for a process to exit.
type exitWaiter interface {
	// wait blocks until the process exits (true) or stop is called (false).
	wait() bool
	stop()
}

// holdPID starts (or joins) the exit watch of the process behind a bound
// acquire when the request arrives, before it waits: the pidfd then refers
// to the process that asked, however long the wait and whatever process
// gets its pid afterwards. Pair with unholdPID; addLease binds to this watch.
func (s *Server) holdPID(pid int32) *pidWatch {
	if pid <= 0 || int(pid) == os.Getpid() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pw := s.pids[pid]
	if pw == nil || pw.exited {
		pw = s.startPIDWatchLocked(pid)
	}
	if pw.linger != nil {
		pw.linger.Stop()
		pw.linger = nil
	}
	pw.holds++
	return pw
}

func (s *Server) unholdPID(pw *pidWatch) {
	if pw == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pw.holds--
	if pw.holds == 0 && len(pw.leases) == 0 && !pw.exited && s.pids[pw.pid] == pw {
		s.idleLocked(pw)
	}
}

func (s *Server) startPIDWatchLocked(pid int32) *pidWatch {
	pw := &pidWatch{pid: pid, leases: map[string]*lease{}, w: newExitWaiter(int(pid), s.log)}
	s.pids[pid] = pw
	s.wg.Add(1)
	go s.runPIDWatch(pw)
	return pw
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
		pw = s.startPIDWatchLocked(l.pid)
	}
	if pw.linger != nil {
		pw.linger.Stop()
		pw.linger = nil
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
	pw.exited = true
	if s.pids[pw.pid] == pw {
		delete(s.pids, pw.pid)
	}
	ls := make([]*lease, 0, len(pw.leases))
	for _, l := range pw.leases {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	pw.stop()
	const msg = "the process that acquired the lease exited"
	for _, l := range ls {
		// Re-entered (possibly by another process, told a valid_until of
		// its own): its holders are told lost and the lock is freed after
		// the validity told. Else at once. (The hold count is checked in
		// the section that ends the lease: a re-entry racing the exit
		// lands on one side.)
		for l.holdsOf() > 0 {
			if ended, told := s.endLease(l, api.StateLost, api.ReasonProcessExited, msg, func() bool { return l.holds > 1 }, true); ended {
				s.freeAfter(l, told)
				break
			}
			if s.finishLease(l, api.StateLost, api.ReasonProcessExited, msg, func() bool { return l.holds <= 1 }) {
				s.releaseGrant(l.g)
				break
			}
		}
	}
}

// errCallerExited: a bound acquire's process exited while it waited.
var errCallerExited = errors.New("the process that asked for the lease exited while it waited")
