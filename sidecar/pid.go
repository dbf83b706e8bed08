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
	leases   map[string]*lease // guarded by leaseTable.mu
	linger   *time.Timer       // guarded by leaseTable.mu: stops an idle watch later
	holds    int               // guarded by leaseTable.mu: acquires waiting with this watch (holdPID)
	exited   bool              // guarded by leaseTable.mu: the process exited
	w        exitWaiter
	stopOnce sync.Once
}

// pidLinger keeps a process's watch after its last lease ends, so that a
// process locking in a loop does not open and close a pidfd (and wake a
// goroutine) per lock.
const pidLinger = 30 * time.Second

// idleLocked is called when pw's last lease ended. t.mu must be held.
func (t *leaseTable) idleLocked(pw *pidWatch) {
	if t.closed {
		delete(t.pids, pw.pid)
		pw.stop()
		return
	}
	pw.linger = time.AfterFunc(pidLinger, func() {
		t.mu.Lock()
		idle := len(pw.leases) == 0 && pw.holds == 0 && t.pids[pw.pid] == pw
		if idle {
			delete(t.pids, pw.pid)
		}
		t.mu.Unlock()
		if idle {
			pw.stop()
		}
	})
}

// stopPIDsLocked stops every watch (teardown). t.mu must be held.
func (t *leaseTable) stopPIDsLocked() {
	for pid, pw := range t.pids {
		if pw.linger != nil {
			pw.linger.Stop()
		}
		delete(t.pids, pid)
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

// selfPID is this process's pid: os.Getpid is a system call each time,
// and every bound acquire (the Go client's default) asked it twice.
var selfPID = int32(os.Getpid())

// holdPID starts (or joins) the exit watch of the process behind a bound
// acquire when the request arrives, before it waits: the pidfd then refers
// to the process that asked, however long the wait and whatever process
// gets its pid afterwards. Pair with unholdPID; add binds to this watch.
func (t *leaseTable) holdPID(pid int32) *pidWatch {
	if pid <= 0 || pid == selfPID {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	pw := t.pids[pid]
	if pw == nil || pw.exited {
		pw = t.startPIDWatchLocked(pid)
	}
	if pw.linger != nil {
		pw.linger.Stop()
		pw.linger = nil
	}
	pw.holds++
	return pw
}

func (t *leaseTable) unholdPID(pw *pidWatch) {
	if pw == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	pw.holds--
	if pw.holds == 0 && len(pw.leases) == 0 && !pw.exited && t.pids[pw.pid] == pw {
		t.idleLocked(pw)
	}
}

func (t *leaseTable) startPIDWatchLocked(pid int32) *pidWatch {
	pw := &pidWatch{pid: pid, leases: map[string]*lease{}, w: newExitWaiter(int(pid), t.log)}
	t.pids[pid] = pw
	t.wg.Add(1)
	go t.runPIDWatch(pw)
	return pw
}

// watchPIDLocked adds l to its process's watch, starting one if needed.
// Leases of the sidecar's own process (in-process clients) and of callers
// whose pid is not visible (another pid namespace: 0) rely on the lease
// alone. t.mu must be held.
func (t *leaseTable) watchPIDLocked(l *lease) {
	if l.pid <= 0 || l.pid == selfPID {
		return
	}
	pw := t.pids[l.pid]
	if pw == nil {
		pw = t.startPIDWatchLocked(l.pid)
	}
	if pw.linger != nil {
		pw.linger.Stop()
		pw.linger = nil
	}
	pw.leases[l.id] = l
	l.pw = pw
}

// runPIDWatch waits for pw's process to exit (or the watch to stop) and
// then ends its leases: at once, or, for a lease re-entered meanwhile, as
// a taken lease freed after the validity told (see leaseTable).
func (t *leaseTable) runPIDWatch(pw *pidWatch) {
	defer t.wg.Done()
	if !pw.w.wait() {
		return
	}
	t.mu.Lock()
	pw.exited = true
	if t.pids[pw.pid] == pw {
		delete(t.pids, pw.pid)
	}
	ls := make([]*lease, 0, len(pw.leases))
	for _, l := range pw.leases {
		ls = append(ls, l)
	}
	t.mu.Unlock()
	pw.stop()
	const msg = "the process that acquired the lease exited"
	for _, l := range ls {
		// Re-entered (possibly by another process, told a valid_until of
		// its own): its holders are told lost and the lock is freed after
		// the validity told. Else at once. (The hold count is checked in
		// the section that ends the lease: a re-entry racing the exit
		// lands on one side.)
		for l.holdsOf() > 0 {
			if ended, told := t.end(l, api.StateLost, api.ReasonProcessExited, msg, func() bool { return l.holds > 1 }, true); ended {
				t.freeAfter(l, told)
				break
			}
			if t.finish(l, api.StateLost, api.ReasonProcessExited, msg, func() bool { return l.holds <= 1 }) {
				t.releaseGrant(l.g)
				break
			}
		}
	}
}

// errCallerExited: a bound acquire's process exited while it waited.
var errCallerExited = errors.New("the process that asked for the lease exited while it waited")
