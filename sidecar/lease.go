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

// lease is a grant handed out through the API.
type lease struct {
	id     string
	g      holding // a grant, or a set's (holding.go)
	pid    int32
	length time.Duration // default length of a renewal
	pw     *pidWatch     // guarded by leaseTable.mu
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

type tombRef struct {
	id    string
	until time.Time
}

// releaseGrant releases a grant the server ends on its own.
func (t *leaseTable) releaseGrant(g holding) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	// Abandon: not the holder's release, a vanish for lock-delay (delay.go).
	if err := g.Abandon(ctx); err != nil && !errors.Is(err, lock.ErrLockLost) && !errors.Is(err, lock.ErrNoNode) {
		t.log.Error("release failed; the lock is freed when the session ends", "object", g.Object(), "token", g.Token(), "err", err)
	}
}

// expire ends a lease not renewed by lease_expires_at (and releases its
// lock); a renewal moved the expiry meanwhile: wait again.
func (t *leaseTable) expire(l *lease) {
	if t.finish(l, api.StateLost, api.ReasonLeaseExpired, "not renewed by lease_expires_at", func() bool {
		return !time.Now().Before(l.expires)
	}) {
		t.releaseGrant(l.g)
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
func (t *leaseTable) view(l *lease, tell bool) api.Lease {
	g := l.g
	out := api.Lease{
		LeaseID: l.id, Object: g.Object(), Type: g.Type().String(), Info: g.Info(), Token: g.Token(), Node: g.Node(),
		AcquiredAt: api.NewTime(g.AcquiredAt()), WaitedMS: g.Waited().Milliseconds(), Mode: modeOf(g.Shared()),
	}
	recipeView(&out, g)
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
	case t.drain.graceOver():
		// The drain's grace is over: what was told is all the holder gets.
		out.State, out.Reason = api.StateLost, api.ReasonShutdown
		out.ValidUntil, out.ValidForMS = api.NewTime(l.told), msUntil(l.told, now)
	default:
		st, gv := g.State(), g.ValidUntil()
		if gv.IsZero() || st == lock.Lost || st == lock.Released {
			out.State, out.Reason = api.StateLost, lostReason(g.Err())
			if st == lock.Lost && g.Err() == nil {
				// the session's deadline passed and its monitor has not
				// said so yet: the validity ran out, nothing was deleted
				out.Reason = api.ReasonSessionLost
			}
			out.ValidUntil = api.NewTime(minTime(l.told, now))
			return out
		}
		vu := minTime(l.expires, gv)
		out.State = st.String()
		if t.drain.stopping() {
			// Draining: never valid past the end of the grace.
			vu = minTime(vu, t.drain.end)
			de := api.NewTime(t.drain.end)
			out.DrainEndsAt, out.DrainForMS = &de, msUntil(t.drain.end, now)
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
func (t *leaseTable) state(l *lease) string {
	l.mu.Lock()
	ended, st, preempted := l.ended, l.state, !l.preemptAt.IsZero()
	l.mu.Unlock()
	if ended {
		return st
	}
	if t.drain.graceOver() {
		return api.StateLost
	}
	switch l.g.State() {
	case lock.Held:
		if t.drain.stopping() {
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

// waitChange is the long-poll of GET /v1/leases/{id}?wait=lost: it blocks
// until the lease is lost or released, or its state differs from the one
// it had when the poll began (held → suspect, suspect → held), or timeout
// passes. A poll that starts while held thus returns as soon as the lease
// is no longer held; one that starts while suspect waits for the outcome
// instead of answering at once. sessionChanged returns a channel closed at
// the next ZooKeeper session event, which wakes the poll.
//
// known, if not empty, is the state the caller last saw (state=): the poll
// compares with it instead of the state at its start, so a change that
// happened between the caller's last answer and this poll (a drain that
// began meanwhile) is answered at once instead of waiting for the next.
func (t *leaseTable) waitChange(ctx context.Context, l *lease, timeout time.Duration, known string, sessionChanged func() <-chan struct{}) error {
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	// Session events wake us at once; the tick is a backstop.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	initial := known
	if initial == "" {
		initial = t.state(l)
	}
	var drainStarts <-chan struct{} // nil once draining: it would wake us forever
	if !t.drain.stopping() {
		drainStarts = t.drain.ctx.Done()
	}
	for {
		sc := sessionChanged()
		pc := l.changedCh()
		if st := t.state(l); st != initial || st == api.StateLost || st == api.StateReleased {
			return nil
		}
		select {
		case <-l.done:
		case <-l.g.Done():
		case <-sc:
		case <-pc:
		case <-drainStarts:
			drainStarts = nil
		case <-t.drain.over:
		case <-tick.C:
		case <-tm.C:
			return nil
		case <-ctx.Done():
			return clientGone(ctx.Err())
		}
	}
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
func (t *leaseTable) renew(l *lease, length time.Duration) (api.Lease, error) {
	if t.drain.graceOver() {
		return api.Lease{}, lockLost(api.ReasonShutdown, "the sidecar is shutting down and its grace is over: no lease is renewed; finish within the "+
			"valid_until told before, and release")
	}
	if err := l.g.Err(); err != nil {
		t.endLost(l, err)
		return api.Lease{}, lockLost(lostReason(err), "lease %s on %q is lost: %v", l.id, l.g.Object(), err)
	}
	now := time.Now()
	l.mu.Lock()
	switch {
	case l.ended:
		l.mu.Unlock()
		return api.Lease{}, t.endedErr(l)
	case !now.Before(l.expires):
		l.mu.Unlock()
		// An op delivery's grant is the dispatcher's to release (after
		// its done), not this renewal's.
		if t.finish(l, api.StateLost, api.ReasonLeaseExpired, "not renewed by lease_expires_at", nil) && !l.external {
			t.releaseGrant(l.g)
		}
		_, err := t.lookup(l.id)
		return api.Lease{}, err
	}
	l.expires = now.Add(length)
	if l.expires.Before(l.told) {
		l.expires = l.told
	}
	l.mu.Unlock()
	v := t.view(l, true)
	if v.State == api.StateLost || v.State == api.StateReleased {
		// Ended (or its grant lost, or the grace over) since the check
		// above: a renewal of a lost lease answers 410, never 200.
		if l.holdsOf() == 0 {
			return api.Lease{}, t.endedErr(l)
		}
		return api.Lease{}, lockLost(v.Reason, "lease %s on %q is lost: %s", l.id, l.g.Object(), v.Reason)
	}
	return v, nil
}

// endedErr is the error an ended lease answers with, also while
// finishLease has not yet moved it from the live leases to the tombstones.
func (t *leaseTable) endedErr(l *lease) error {
	if _, err := t.lookup(l.id); err != nil {
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

// release is the holder's DELETE. With wait false (DELETE ?wait=false,
// SPEC §5's explicit mode) the last hold's release answers before its
// ZooKeeper write lands: the lease ends now, the grant is freed in the
// background, and the answer says so (released false, releasing true).
// The lock stays held in ZooKeeper until that write lands, so nobody can
// be granted before it; an acquire of the same object on this sidecar
// waits for it (freeingStart, afterFreeing) and is then granted as after a
// waited release.
func (t *leaseTable) release(ctx context.Context, l *lease, wait bool) (api.ReleaseResponse, error) {
	g := l.g
	if err := g.Err(); err != nil {
		t.endLost(l, err)
		return api.ReleaseResponse{}, lockLost(lostReason(err), "lease %s on %q was lost before the release: %v", l.id, g.Object(), err)
	}
	if res, done, err := t.releaseHold(l); done {
		return res, err
	}
	return t.releaseLast(ctx, l, wait)
}

// releaseLast ends l on the release of its last hold and frees its grant.
func (t *leaseTable) releaseLast(ctx context.Context, l *lease, wait bool) (api.ReleaseResponse, error) {
	g := l.g
	// The last hold ends the lease in the same section of l.mu that checks
	// it is the last: a re-entry that added a hold meanwhile (and was told
	// a valid_until) keeps the lease, and this release counts one down.
	for !t.finish(l, api.StateReleased, "", "", func() bool { return l.holds <= 1 }) {
		if res, done, err := t.releaseHold(l); done {
			return res, err
		}
		if l.holdsOf() == 0 {
			return api.ReleaseResponse{}, t.endedErr(l)
		}
	}
	if !wait {
		end := func() {}
		if _, single := g.(*lock.Grant); single && !g.Shared() {
			end = t.freeingStart(g.Object())
		}
		if t.spawn(func() {
			defer end()
			// No tomb: the holder was answered that its lease ended, and
			// its id goes on answering 404 like any released lease's.
			if err := t.free(context.Background(), l, false); err != nil {
				t.log.Info("a release answered before its write found the lock already lost", "lease", logID(l.id), "object", g.Object(), "err", err)
			}
		}) {
			return api.ReleaseResponse{Releasing: true, Object: g.Object(), Token: g.Token()}, nil
		}
		end() // the table is closed (teardown): this release waits for its write
	}
	if err := t.free(ctx, l, true); err != nil {
		return api.ReleaseResponse{}, err
	}
	return api.ReleaseResponse{Released: true, Object: g.Object(), Token: g.Token()}, nil
}

// free frees the grant of the ended lease l: nil once freed or handed to
// retryRelease (the grant is still ours in the engine), the 410 error if
// the grant was lost before its release (recorded as the lease's tomb with
// tombOnLoss; not after a release answered first, ?wait=false: its holder
// was told the lease ended, and the id answers 404 as released).
func (t *leaseTable) free(ctx context.Context, l *lease, tombOnLoss bool) error {
	g := l.g
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	err := g.Release(rctx)
	switch {
	case err == nil, errors.Is(err, lock.ErrNoNode):
	case errors.Is(err, lock.ErrLockLost):
		reason := lostReason(err)
		if tombOnLoss {
			t.addTomb(l.id, tomb{reason: reason, object: g.Object(), msg: err.Error(), until: time.Now().Add(TombstoneTTL)})
		}
		return lockLost(reason, "lease %s on %q was lost before the release: %v", l.id, g.Object(), err)
	default:
		// The grant is still ours in the engine: keep trying in the background.
		// (Not once the table is closed: the engine's Close ends the
		// session and its nodes.)
		t.log.Warn("release failed; retrying in the background", "lease", logID(l.id), "object", g.Object(), "err", err)
		t.spawn(func() { t.retryRelease(g) })
	}
	return nil
}

// spawn runs f in a goroutine that teardown waits for (t.wg), unless the
// table is closed: teardown may then be in wg.Wait with the count at zero,
// which an Add must not race. It reports whether f runs.
func (t *leaseTable) spawn(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Go(f)
	return true
}

func (t *leaseTable) retryRelease(g holding) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-nothingToFree(g): // a set: every member ended
			return
		case <-t.drain.closing:
			return // the engine's Close ends the session and its nodes
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		err := g.Release(ctx)
		cancel()
		if err == nil || errors.Is(err, lock.ErrNoNode) || errors.Is(err, lock.ErrLockLost) {
			return
		}
	}
}
