package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/props"
)

// leaseTable owns the leases this sidecar has handed out and what outlives
// or watches them: the tombstones of lost leases, the exit watches of the
// processes leases are bound to (pid.go), the taken leases whose grants are
// freed later (revoked), and the count of op deliveries among the leases
// (reentry.go). mu guards all of these; a lease's own fields are guarded by
// its lease.mu, which is taken after mu when both are held. Its methods
// are safe for concurrent use.
//
// The rules it keeps, each in one place:
//   - A lease's lock is never freed before the last valid_until told to its
//     holder (lease.told), except on the holder's own release of its last
//     hold or the exit of its bound process with no hold re-entered: an
//     ended lease is told nothing more (told is final once ended; view);
//     a renewal never moves lease_expires_at before told (renew), so an
//     expiry never cuts it; a lease ended by anyone else (revoked,
//     preempted forcefully, its op delivery or process gone while
//     re-entered) is kept in revoked with its told until its grant is freed
//     after it (end with keep, freeAfter), and the drain waits for those
//     (waitRevoked) before the engine is closed.
//   - A lease is in leases exactly while it is live. It leaves in one
//     section of mu (end) that also leaves its tombstone (when lost),
//     records it in revoked (with keep), gives back its owner's lease slot,
//     drops it from its process's watch and wakes the drain (ended).
//   - A lost lease's id answers 410 for TombstoneTTL (the newest
//     maxTombstones are kept); a lease id of another incarnation answers
//     410 "sidecar restarted".
//   - deliveries counts the op deliveries' leases (external) in leases:
//     they are not API leases, and never listed.
//   - Nothing is added once the drain has begun or the table is closed.
type leaseTable struct {
	inc     string // the incarnation: every lease id starts with it
	log     *slog.Logger
	m       *metrics
	revokes *prometheus.CounterVec // baton_revocations_total (revoke.go)
	caps    *uidCaps
	drain   *drainState
	cfg     func() *props.Config
	wg      *sync.WaitGroup // the table's goroutines: exit watches, background releases (Server.teardown waits)

	mu         sync.Mutex
	leases     map[string]*lease
	tombs      map[string]tomb
	tombQ      []tombRef
	pids       map[int32]*pidWatch
	revoked    map[*lease]time.Time // taken leases, with the last valid_until told: freed after it
	deliveries int                  // op deliveries among leases (reentry.go)
	ended      chan struct{}        // closed and replaced whenever a lease ends
	closed     bool
	freeing    map[string]*freeing // objects with an exclusive no-wait release in flight (freeingStart)
	nfreeing   atomic.Int32        // len(freeing): the acquire path reads it without mu
}

// freeing is an object's no-wait releases in flight: done is closed when
// the last of them has ended.
type freeing struct {
	n    int
	done chan struct{}
}

func newLeaseTable(s *Server) *leaseTable {
	return &leaseTable{
		inc: s.inc, log: s.log, m: s.m, revokes: newRevokeMetric(), caps: s.caps, drain: s.drain, cfg: s.config, wg: &s.wg,
		leases: map[string]*lease{}, tombs: map[string]tomb{}, pids: map[int32]*pidWatch{}, revoked: map[*lease]time.Time{},
		ended: make(chan struct{}), freeing: map[string]*freeing{},
	}
}

// freeingStart records that the release of an exclusive grant of object
// answered before its write (release with wait false) and is in flight;
// the returned func ends the record once the write has landed or failed.
// An acquire of object on this sidecar waits for it (freeingOf), so that
// it is granted after it in one write rather than queueing a node behind
// it: the order is the same, the cost is not.
func (t *leaseTable) freeingStart(object string) (end func()) {
	t.mu.Lock()
	f := t.freeing[object]
	if f == nil {
		f = &freeing{done: make(chan struct{})}
		t.freeing[object] = f
		t.nfreeing.Add(1)
	}
	f.n++
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		if f.n--; f.n == 0 {
			delete(t.freeing, object)
			t.nfreeing.Add(-1)
			close(f.done)
		}
		t.mu.Unlock()
	}
}

// freeingOf returns a channel closed when no no-wait release of object is
// in flight any more, nil if none is now.
func (t *leaseTable) freeingOf(object string) <-chan struct{} {
	if t.nfreeing.Load() == 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.freeing[object]; f != nil {
		return f.done
	}
	return nil
}

func (t *leaseTable) newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return t.inc + "." + hex.EncodeToString(b[:])
}

// active is the number of API leases (op deliveries not counted).
func (t *leaseTable) active() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.leases) - t.deliveries
}

// add registers a fresh grant as a lease and starts watching it. It
// fails (and the caller must release g) when shutdown has begun.
// held, if not nil, is the exit watch holdPID started when the request
// arrived: a process that exited during the wait gets no lease.
// On success the lease takes over the caller's sidecar.max.leases.per.uid
// slot of o (given back when it ends).
func (t *leaseTable) add(g holding, pid int32, held *pidWatch, length time.Duration, o owner) (*lease, error) {
	now := time.Now()
	l := &lease{
		id: t.newID(), g: g, pid: pid, length: length, owner: o, capped: true,
		expires: now.Add(length), done: make(chan struct{}), holds: 1, changed: make(chan struct{}),
	}
	t.mu.Lock()
	if t.drain.stopping() || t.closed {
		t.mu.Unlock()
		return nil, shuttingDown(nil)
	}
	if held != nil && held.exited {
		t.mu.Unlock()
		return nil, errCallerExited
	}
	t.leases[l.id] = l
	t.watchPIDLocked(l)
	l.mu.Lock()
	l.timer = time.AfterFunc(length, func() { t.expire(l) })
	l.stopLost = context.AfterFunc(g.Context(), func() { t.lost(l) })
	l.mu.Unlock()
	t.mu.Unlock()
	t.m.countLease(leaseGranted)
	if t.log.Enabled(context.Background(), slog.LevelDebug) { // the attributes alone cost 8 allocations
		t.log.Debug("lease granted", "lease_id", l.id, "object", g.Object(), "type", g.Type(), "token", g.Token(),
			"node", g.Node(), "pid", pid, "lease", length, "waited", g.Waited())
	}
	return l, nil
}

// lost ends l when its grant is lost (the engine's callback on the grant's
// context).
func (t *leaseTable) lost(l *lease) {
	if err := l.g.Err(); err != nil {
		t.endLost(l, err)
	}
}

// lookup finds a live lease, or returns the error its id answers with.
func (t *leaseTable) lookup(id string) (*lease, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.leases[id]; l != nil {
		return l, nil
	}
	t.pruneTombsLocked(maxTombstones)
	if tb, ok := t.tombs[id]; ok && time.Now().Before(tb.until) {
		return nil, lockLost(tb.reason, "lease %s on %q is lost: %s", id, tb.object, tb.msg)
	}
	if m := leaseIDRE.FindStringSubmatch(id); m != nil && m[1] != t.inc {
		return nil, lockLost(api.ReasonSidecarRestarted,
			"lease %s was granted by an earlier run of the sidecar (incarnation %s, now %s); its lock was freed when that run ended", id, m[1], t.inc)
	}
	return nil, newError(api.NoNode, "no lease %q: never granted, or released", id)
}

// byToken returns the live lease of this sidecar holding object with
// token, or nil.
func (t *leaseTable) byToken(object string, token int64) *lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range t.leases {
		if holdsToken(l.g, object, token) {
			return l
		}
	}
	return nil
}

// owned returns the API leases of uid (all: every API lease), oldest
// grant first. Op deliveries' leases are not among them.
func (t *leaseTable) owned(uid uint32, known, all bool) []*lease {
	t.mu.Lock()
	mine := make([]*lease, 0, len(t.leases))
	for _, l := range t.leases {
		if l.external || !l.owner.set {
			continue
		}
		if all || (known && l.owner.uid == uid) {
			mine = append(mine, l)
		}
	}
	t.mu.Unlock()
	slices.SortFunc(mine, func(a, b *lease) int {
		if c := a.g.AcquiredAt().Compare(b.g.AcquiredAt()); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	return mine
}

// finish ends l once, if cond (evaluated under l.mu) holds. A lost
// lease leaves a tombstone. It does not release the grant.
func (t *leaseTable) finish(l *lease, state, reason, msg string, cond func() bool) bool {
	ended, _ := t.end(l, state, reason, msg, cond, false)
	return ended
}

// end is finish; with keep, the lease is also recorded in revoked with the
// last valid_until told to its holder (returned), in the same section of
// mu that removes it from the live leases and wakes the drain: the drain
// then waits for that instant before it closes the engine. The caller
// frees the grant only after it (freeAfter) and then removes the record.
func (t *leaseTable) end(l *lease, state, reason, msg string, cond func() bool, keep bool) (bool, time.Time) {
	now := time.Now()
	l.mu.Lock()
	if l.ended || (cond != nil && !cond()) {
		l.mu.Unlock()
		return false, time.Time{}
	}
	l.ended, l.state, l.reason, l.endedAt = true, state, reason, now
	told := l.told // final: an ended lease is told nothing more
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.stopLost != nil {
		l.stopLost()
	}
	l.mu.Unlock()
	close(l.done)

	t.mu.Lock()
	delete(t.leases, l.id)
	if l.external {
		t.deliveries--
	}
	if state == api.StateLost {
		t.addTombLocked(l.id, tomb{reason: reason, object: l.g.Object(), msg: msg, until: now.Add(TombstoneTTL)})
	}
	if pw := l.pw; pw != nil {
		delete(pw.leases, l.id)
		if len(pw.leases) == 0 && t.pids[pw.pid] == pw {
			t.idleLocked(pw)
		}
	}
	if keep {
		t.revoked[l] = told
	}
	if l.capped {
		t.caps.put(l.owner.uid, capLeases)
	}
	close(t.ended)
	t.ended = make(chan struct{})
	t.mu.Unlock()
	t.observeEnd(l, now, reason, msg)
	return true, told
}

// observeEnd counts and logs the end of l (an op delivery's is counted by
// the dispatcher's metrics).
func (t *leaseTable) observeEnd(l *lease, now time.Time, reason, msg string) {
	if l.external {
		return
	}
	result := leaseReleased
	switch reason {
	case api.ReasonLeaseExpired:
		result = leaseExpired
	case api.ReasonProcessExited:
		result = leaseProcessExited
	case api.ReasonShutdown:
		result = leaseShutdown
	case "":
	default:
		result = leaseLost
	}
	t.m.countLease(result)
	t.m.observeHold(l.g.Type().String(), result, now.Sub(l.g.AcquiredAt()).Seconds())
	if result == leaseReleased && !t.log.Enabled(context.Background(), slog.LevelDebug) {
		return // the usual end: no line, so no attributes built (nor the id redacted)
	}
	attrs := []any{"lease", logID(l.id), "object", l.g.Object(), "token", l.g.Token(), "held", now.Sub(l.g.AcquiredAt())}
	switch result {
	case leaseReleased:
		t.log.Debug("lease released", attrs...)
	case leaseLost:
		t.log.Warn("lease lost", append(attrs, "reason", reason, "cause", msg)...)
	default:
		t.log.Info("lease ended", append(attrs, "reason", reason)...)
	}
}

func (t *leaseTable) addTombLocked(id string, tb tomb) {
	t.pruneTombsLocked(maxTombstones - 1)
	t.tombs[id] = tb
	t.tombQ = append(t.tombQ, tombRef{id, tb.until})
}

// addTomb records that the lease id was lost (a release that found its
// grant already lost).
func (t *leaseTable) addTomb(id string, tb tomb) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.addTombLocked(id, tb)
}

// pruneTombsLocked drops expired tombstones, and the oldest beyond keep.
// It runs on every lookup too, so expired tombstones do not stay until the
// next loss. t.mu must be held.
func (t *leaseTable) pruneTombsLocked(keep int) {
	now := time.Now()
	for len(t.tombQ) > 0 {
		old := t.tombQ[0]
		if now.Before(old.until) && len(t.tombQ) <= keep {
			break
		}
		if cur, ok := t.tombs[old.id]; ok && cur.until.Equal(old.until) {
			delete(t.tombs, old.id)
		}
		t.tombQ = t.tombQ[1:]
	}
	if len(t.tombQ) == 0 {
		t.tombQ = nil // let the backing array go
	}
}

// waitUntil waits until no lease is left, the instant until returns
// (given the latest valid_until told to a holder) has passed, or the
// drain is cut short. It returns the number of leases left.
func (t *leaseTable) waitUntil(until func(lastTold time.Time) time.Time) int {
	tm := time.NewTimer(time.Hour)
	defer tm.Stop()
	for {
		t.mu.Lock()
		n := len(t.leases)
		var last time.Time
		for _, l := range t.leases {
			l.mu.Lock()
			if l.told.After(last) {
				last = l.told
			}
			l.mu.Unlock()
		}
		ended := t.ended
		t.mu.Unlock()
		if n == 0 {
			return 0
		}
		d := time.Until(until(last))
		if d <= 0 {
			return n
		}
		tm.Reset(d)
		select {
		case <-ended:
		case <-tm.C:
		case <-t.drain.hurry:
			return n
		}
		tm.Stop()
	}
}

// drainOut is the leases' part of the drain (Server.drain): wait for the
// holders to release until end; then tell the leases left they are lost
// and wait for the last valid_until told to them, and for the grants of
// taken leases to be freed after theirs; then release what is left.
func (t *leaseTable) drainOut(end time.Time) {
	if n := t.waitUntil(func(time.Time) time.Time { return end }); n > 0 {
		t.drain.endGrace()
		t.log.Warn("shutdown grace over: the holders left are told their lock is lost; each is released after the validity told to it",
			"leases", n, "grace", t.drain.grace)
		t.waitUntil(func(last time.Time) time.Time { return last })
	}
	t.drain.endGrace()
	t.waitRevoked()
	t.endAll()
}

// endAll releases every lease left (reason "shutdown").
func (t *leaseTable) endAll() {
	t.mu.Lock()
	ls := make([]*lease, 0, len(t.leases))
	for _, l := range t.leases {
		ls = append(ls, l)
	}
	t.mu.Unlock()
	for _, l := range ls {
		if t.finish(l, api.StateLost, api.ReasonShutdown, "the sidecar shut down", nil) && !l.external {
			t.releaseGrant(l.g) // an op delivery's grant is the dispatcher's to release
		}
	}
}

// close refuses new leases, releases those left and stops the exit
// watches (teardown).
func (t *leaseTable) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.endAll()
	t.mu.Lock()
	t.stopPIDsLocked()
	t.mu.Unlock()
}
