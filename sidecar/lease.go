package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
)

// TombstoneTTL is how long a lost lease's id keeps answering 410 LockLost.
const TombstoneTTL = 15 * time.Minute

// maxTombstones bounds the memory of lost-lease ids; past it the oldest go
// first (only under an extreme rate of losses).
const maxTombstones = 1 << 20

// releaseTimeout bounds a release the server does on its own (expiry,
// process exit, shutdown).
const releaseTimeout = 10 * time.Second

// A lease id is "<incarnation>.<128 random bits>", both hex.
var leaseIDRE = regexp.MustCompile(`^([0-9a-f]{16})\.[0-9a-f]{32}$`)

func newIncarnation(now time.Time) string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%012x%s", now.UnixMilli()&(1<<48-1), hex.EncodeToString(b[:]))
}

func (s *Server) newLeaseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return s.inc + "." + hex.EncodeToString(b[:])
}

// lease is a grant handed out through the API.
type lease struct {
	id     string
	g      *lock.Grant
	pid    int32
	length time.Duration // default length of a renewal
	pw     *pidWatch     // guarded by Server.mu
	owner  owner         // the uid that acquired it (auth.go); none for op deliveries
	capped bool          // counted against owner's sidecar.max.leases.per.uid (caps.go)

	mu      sync.Mutex
	expires time.Time // lease_expires_at (monotonic); never before told
	told    time.Time // the latest valid_until told to the holder (monotonic)
	ended   bool
	state   string // once ended: api.StateLost or api.StateReleased
	holds   int    // holders of a re-entered lease (reentry.go); 1 when acquired
	// external: an op delivery's grant (reentry.go), held and released by
	// the dispatcher; the API may re-enter it, never free its last hold.
	external bool
	// Preemption (preempt.go): fixed at the grant.
	preemptible bool
	cleanup     time.Duration
	preemptAt   time.Time     // guarded by mu: when a preemption reached it; zero: none (or lifted)
	preemptMsg  string        // guarded by mu
	preemptGen  int           // guarded by mu: counts preemptions and lifts, so a stale timer does nothing
	changed     chan struct{} // guarded by mu: closed and replaced when preemptAt changes
	reason      string
	endedAt     time.Time

	// No goroutine per lease: expiry is a timer that re-arms itself while
	// renewals move lease_expires_at, and the grant's loss is a callback on
	// its context (a goroutine and its wake-ups per lock cycle showed as
	// scheduling delay on every acquire/release).
	timer    *time.Timer
	stopLost func() bool
	done     chan struct{} // closed when the lease ends
}

type tomb struct {
	reason, object, msg string
	until               time.Time
}

func (s *Server) activeLeases() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leases) - s.deliveries
}

// addLease registers a fresh grant as a lease and starts watching it. It
// fails (and the caller must release g) when shutdown has begun.
// held, if not nil, is the exit watch holdPID started when the request
// arrived: a process that exited during the wait gets no lease.
// On success the lease takes over the caller's sidecar.max.leases.per.uid
// slot of o (given back when it ends).
func (s *Server) addLease(g *lock.Grant, pid int32, held *pidWatch, length time.Duration, o owner) (*lease, error) {
	now := time.Now()
	l := &lease{
		id: s.newLeaseID(), g: g, pid: pid, length: length, owner: o, capped: true,
		expires: now.Add(length), done: make(chan struct{}), holds: 1, changed: make(chan struct{}),
	}
	s.mu.Lock()
	if s.stopping() || s.closed {
		s.mu.Unlock()
		return nil, shuttingDown(nil)
	}
	if held != nil && held.exited {
		s.mu.Unlock()
		return nil, errCallerExited
	}
	s.leases[l.id] = l
	s.watchPIDLocked(l)
	l.mu.Lock()
	l.timer = time.AfterFunc(length, func() { s.expire(l) })
	l.stopLost = context.AfterFunc(g.Context(), func() {
		if err := g.Err(); err != nil {
			s.finishLease(l, api.StateLost, lostReason(err), err.Error(), nil)
		}
	})
	l.mu.Unlock()
	s.mu.Unlock()
	s.m.leases.WithLabelValues(leaseGranted).Inc()
	s.log.Debug("lease granted", "lease_id", l.id, "object", g.Object(), "type", g.Type(), "token", g.Token(),
		"node", g.Node(), "pid", pid, "lease", length, "waited", g.Waited())
	return l, nil
}

// lookup finds a live lease, or returns the error its id answers with.
func (s *Server) lookup(id string) (*lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.leases[id]; l != nil {
		return l, nil
	}
	s.pruneTombsLocked(maxTombstones)
	if t, ok := s.tombs[id]; ok && time.Now().Before(t.until) {
		return nil, lockLost(t.reason, "lease %s on %q is lost: %s", id, t.object, t.msg)
	}
	if m := leaseIDRE.FindStringSubmatch(id); m != nil && m[1] != s.inc {
		return nil, lockLost(api.ReasonSidecarRestarted,
			"lease %s was granted by an earlier run of the sidecar (incarnation %s, now %s); its lock was freed when that run ended", id, m[1], s.inc)
	}
	return nil, newError(api.NoNode, "no lease %q: never granted, or released", id)
}

// finishLease ends l once, if cond (evaluated under l.mu) holds. A lost
// lease leaves a tombstone. It does not release the grant.
func (s *Server) finishLease(l *lease, state, reason, msg string, cond func() bool) bool {
	ended, _ := s.endLease(l, state, reason, msg, cond, false)
	return ended
}

// endLease is finishLease; with keep, the lease is also recorded in
// s.revoked with the last valid_until told to its holder (returned), in
// the same section of s.mu that removes it from the live leases and wakes
// the drain: the drain then waits for that instant before it closes the
// engine. The caller frees the grant only after it (freeAfter) and then
// removes the record.
func (s *Server) endLease(l *lease, state, reason, msg string, cond func() bool, keep bool) (bool, time.Time) {
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

	s.mu.Lock()
	delete(s.leases, l.id)
	if l.external {
		s.deliveries--
	}
	if state == api.StateLost {
		s.addTombLocked(l.id, tomb{reason: reason, object: l.g.Object(), msg: msg, until: now.Add(TombstoneTTL)})
	}
	if pw := l.pw; pw != nil {
		delete(pw.leases, l.id)
		if len(pw.leases) == 0 && s.pids[pw.pid] == pw {
			s.idleLocked(pw)
		}
	}
	if keep {
		s.revoked[l] = told
	}
	if l.capped {
		s.caps.put(l.owner.uid, capLeases)
	}
	close(s.leaseEnded)
	s.leaseEnded = make(chan struct{})
	s.mu.Unlock()

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
	if l.external { // an op delivery's grant: counted by the dispatcher's metrics
		return true, told
	}
	s.m.leases.WithLabelValues(result).Inc()
	s.m.hold.WithLabelValues(l.g.Type().String(), result).Observe(now.Sub(l.g.AcquiredAt()).Seconds())
	attrs := []any{"lease", logID(l.id), "object", l.g.Object(), "token", l.g.Token(), "held", now.Sub(l.g.AcquiredAt())}
	switch result {
	case leaseReleased:
		s.log.Debug("lease released", attrs...)
	case leaseLost:
		s.log.Warn("lease lost", append(attrs, "reason", reason, "cause", msg)...)
	default:
		s.log.Info("lease ended", append(attrs, "reason", reason)...)
	}
	return true, told
}

func (s *Server) addTombLocked(id string, t tomb) {
	s.pruneTombsLocked(maxTombstones - 1)
	s.tombs[id] = t
	s.tombQ = append(s.tombQ, tombRef{id, t.until})
}

// pruneTombsLocked drops expired tombstones, and the oldest beyond keep.
// It runs on every lookup too, so expired tombstones do not stay until the
// next loss. s.mu must be held.
func (s *Server) pruneTombsLocked(keep int) {
	now := time.Now()
	for len(s.tombQ) > 0 {
		old := s.tombQ[0]
		if now.Before(old.until) && len(s.tombQ) <= keep {
			break
		}
		if cur, ok := s.tombs[old.id]; ok && cur.until.Equal(old.until) {
			delete(s.tombs, old.id)
		}
		s.tombQ = s.tombQ[1:]
	}
	if len(s.tombQ) == 0 {
		s.tombQ = nil // let the backing array go
	}
}

type tombRef struct {
	id    string
	until time.Time
}

// releaseGrant releases a grant the server ends on its own.
func (s *Server) releaseGrant(g *lock.Grant) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	// Abandon: not the holder's release, a vanish for lock-delay (delay.go).
	if err := g.Abandon(ctx); err != nil && !errors.Is(err, lock.ErrLockLost) && !errors.Is(err, lock.ErrNoNode) {
		s.log.Error("release failed; the lock is freed when the session ends", "object", g.Object(), "token", g.Token(), "err", err)
	}
}

// expire ends a lease not renewed by lease_expires_at (and releases its
// lock); a renewal moved the expiry meanwhile: wait again.
func (s *Server) expire(l *lease) {
	if s.finishLease(l, api.StateLost, api.ReasonLeaseExpired, "not renewed by lease_expires_at", func() bool {
		return !time.Now().Before(l.expires)
	}) {
		s.releaseGrant(l.g)
		return
	}
	l.mu.Lock()
	if !l.ended {
		l.timer.Reset(time.Until(l.expires))
	}
	l.mu.Unlock()
}

func lostReason(err error) string {
	switch {
	case errors.Is(err, lock.ErrSessionLost):
		return api.ReasonSessionLost
	case errors.Is(err, lock.ErrClosed):
		return api.ReasonShutdown
	}
	return api.ReasonLockDeleted
}

// view renders the lease. With tell, the valid_until shown counts as told
// to the holder: the lock is not freed before it (except on the holder's
// release or its process's exit).
func (s *Server) view(l *lease, tell bool) api.Lease {
	g := l.g
	out := api.Lease{
		LeaseID: l.id, Object: g.Object(), Type: g.Type().String(), Info: g.Info(), Token: g.Token(), Node: g.Node(),
		AcquiredAt: api.NewTime(g.AcquiredAt()), WaitedMS: g.Waited().Milliseconds(),
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	out.LeaseExpiresAt = api.NewTime(l.expires)
	if !l.ended {
		out.Holds = l.holds
	}
	switch {
	case l.ended:
		out.State, out.Reason = l.state, l.reason
		out.ValidUntil = api.NewTime(minTime(l.told, l.endedAt))
	case s.graceOver():
		// The drain's grace is over: what was told is all the holder gets.
		out.State, out.Reason = api.StateLost, api.ReasonShutdown
		out.ValidUntil, out.ValidForMS = api.NewTime(l.told), msUntil(l.told, now)
	default:
		st, gv := g.State(), g.ValidUntil()
		if gv.IsZero() || st == lock.Lost || st == lock.Released {
			out.State, out.Reason = api.StateLost, lostReason(g.Err())
			out.ValidUntil = api.NewTime(minTime(l.told, now))
			return out
		}
		vu := minTime(l.expires, gv)
		out.State = st.String()
		if s.stopping() {
			// Draining: never valid past the end of the grace.
			vu = minTime(vu, s.drainEnd)
			de := api.NewTime(s.drainEnd)
			out.DrainEndsAt, out.DrainForMS = &de, msUntil(s.drainEnd, now)
			if st == lock.Held {
				out.State = api.StateDraining
			}
		}
		if l.preemptible || l.external {
			// Never told further than the cleanup window ahead, and not
			// extended past it once preempted: the lock can be taken then.
			// An op delivery's lease: its cleanup is
			// sidecar.app.preempt.cleanup, what the dispatcher waits after
			// a preemption before it cancels the delivery.
			end := now.Add(l.cleanup)
			if !l.preemptAt.IsZero() {
				end = l.preemptAt.Add(l.cleanup)
				if out.State == api.StateHeld {
					out.State, out.Reason = api.StatePreempted, l.preemptMsg
				}
			}
			vu = minTime(vu, end)
			out.Preemptible, out.CleanupMS = true, l.cleanup.Milliseconds()
		}
		if tell && vu.After(l.told) {
			l.told = vu
		}
		out.ValidUntil, out.ValidForMS = api.NewTime(vu), msUntil(vu, now)
	}
	return out
}

// state reports the lease's current API state without telling anything.
func (s *Server) leaseState(l *lease) string {
	l.mu.Lock()
	ended, st, preempted := l.ended, l.state, !l.preemptAt.IsZero()
	l.mu.Unlock()
	if ended {
		return st
	}
	if s.graceOver() {
		return api.StateLost
	}
	switch l.g.State() {
	case lock.Held:
		if s.stopping() {
			return api.StateDraining
		}
		if preempted {
			return api.StatePreempted
		}
		return api.StateHeld
	case lock.Suspect:
		return api.StateSuspect
	}
	return api.StateLost
}

func minTime(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func msUntil(t, now time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(0, t.Sub(now).Milliseconds())
}

// renew extends the lease to now+length (never before a valid_until
// already told) and returns it as told now.
func (s *Server) renew(l *lease, length time.Duration) (api.Lease, error) {
	if s.graceOver() {
		return api.Lease{}, lockLost(api.ReasonShutdown, "the sidecar is shutting down and its grace is over: no lease is renewed; finish within the valid_until told before, and release")
	}
	if err := l.g.Err(); err != nil {
		s.finishLease(l, api.StateLost, lostReason(err), err.Error(), nil)
		return api.Lease{}, lockLost(lostReason(err), "lease %s on %q is lost: %v", l.id, l.g.Object(), err)
	}
	now := time.Now()
	l.mu.Lock()
	switch {
	case l.ended:
		l.mu.Unlock()
		return api.Lease{}, s.endedErr(l)
	case !now.Before(l.expires):
		l.mu.Unlock()
		// An op delivery's grant is the dispatcher's to release (after
		// its done), not this renewal's.
		if s.finishLease(l, api.StateLost, api.ReasonLeaseExpired, "not renewed by lease_expires_at", nil) && !l.external {
			s.releaseGrant(l.g)
		}
		_, err := s.lookup(l.id)
		return api.Lease{}, err
	}
	l.expires = now.Add(length)
	if l.expires.Before(l.told) {
		l.expires = l.told
	}
	l.mu.Unlock()
	v := s.view(l, true)
	if v.State == api.StateLost || v.State == api.StateReleased {
		// Ended (or its grant lost, or the grace over) since the check
		// above: a renewal of a lost lease answers 410, never 200.
		if l.holdsOf() == 0 {
			return api.Lease{}, s.endedErr(l)
		}
		return api.Lease{}, lockLost(v.Reason, "lease %s on %q is lost: %s", l.id, l.g.Object(), v.Reason)
	}
	return v, nil
}

// endedErr is the error an ended lease answers with, also while
// finishLease has not yet moved it from the live leases to the tombstones.
func (s *Server) endedErr(l *lease) error {
	if _, err := s.lookup(l.id); err != nil {
		return err
	}
	l.mu.Lock()
	st, reason := l.state, l.reason
	l.mu.Unlock()
	if st == api.StateReleased {
		return newError(api.NoNode, "no lease %q: released", l.id)
	}
	return lockLost(reason, "lease %s on %q is lost: %s", l.id, l.g.Object(), reason)
}

// release is the holder's DELETE.
func (s *Server) release(ctx context.Context, l *lease) (api.ReleaseResponse, error) {
	g := l.g
	if err := g.Err(); err != nil {
		s.finishLease(l, api.StateLost, lostReason(err), err.Error(), nil)
		return api.ReleaseResponse{}, lockLost(lostReason(err), "lease %s on %q was lost before the release: %v", l.id, g.Object(), err)
	}
	if res, done, err := s.releaseHold(l); done {
		return res, err
	}
	return s.releaseLast(ctx, l)
}

// releaseLast ends l on the release of its last hold and frees its grant.
func (s *Server) releaseLast(ctx context.Context, l *lease) (api.ReleaseResponse, error) {
	g := l.g
	// The last hold ends the lease in the same section of l.mu that checks
	// it is the last: a re-entry that added a hold meanwhile (and was told
	// a valid_until) keeps the lease, and this release counts one down.
	for !s.finishLease(l, api.StateReleased, "", "", func() bool { return l.holds <= 1 }) {
		if res, done, err := s.releaseHold(l); done {
			return res, err
		}
		if l.holdsOf() == 0 {
			return api.ReleaseResponse{}, s.endedErr(l)
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	err := g.Release(rctx)
	switch {
	case err == nil, errors.Is(err, lock.ErrNoNode):
	case errors.Is(err, lock.ErrLockLost):
		reason := lostReason(err)
		s.mu.Lock()
		s.addTombLocked(l.id, tomb{reason: reason, object: g.Object(), msg: err.Error(), until: time.Now().Add(TombstoneTTL)})
		s.mu.Unlock()
		return api.ReleaseResponse{}, lockLost(reason, "lease %s on %q was lost before the release: %v", l.id, g.Object(), err)
	default:
		// The grant is still ours in the engine: keep trying in the background.
		s.log.Warn("release failed; retrying in the background", "lease", logID(l.id), "object", g.Object(), "err", err)
		s.wg.Add(1)
		go s.retryRelease(g)
	}
	return api.ReleaseResponse{Released: true, Object: g.Object(), Token: g.Token()}, nil
}

func (s *Server) retryRelease(g *lock.Grant) {
	defer s.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-g.Done():
			return
		case <-s.closing:
			return // the engine's Close ends the session and its nodes
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		err := g.Release(ctx)
		cancel()
		if err == nil || errors.Is(err, lock.ErrNoNode) || errors.Is(err, lock.ErrLockLost) {
			return
		}
	}
}
