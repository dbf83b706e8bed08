package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/batonhq/baton/api"
)

// longPoll is how long one loss long-poll waits before it is renewed.
const longPoll = 30 * time.Second

// Lease is a lock held through the sidecar. Its methods are safe for
// concurrent use.
type Lease struct {
	c      *Client
	id     string
	object string
	typ    string
	info   string
	node   string
	mode   string // api.ModeExclusive or api.ModeShared
	token  int64
	length time.Duration // lease length, for the renewal interval
	// A set's objects (AcquireAll), a semaphore's name and permit
	// (AcquirePermit; permit -1 otherwise).
	objects   []api.LeaseObject
	semaphore string
	permit    int

	mu         sync.Mutex
	last       api.Lease
	lastSent   time.Time // send time of the request whose answer set validUntil
	validUntil time.Time // local monotonic: send time + valid_for_ms
	drainUntil time.Time // local monotonic: send time + drain_for_ms; zero unless draining
	state      string    // the state of the latest answer received
	lostErr    error
	changed    chan struct{} // closed and replaced when the state changes
	kick       chan struct{} // asks keep for a renewal now (a long-poll saw the state change)

	lost     chan struct{}
	lostOnce sync.Once
	ctx      context.Context // background requests; cancelled by stopBackground and on loss
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	started  bool
}

func newLease(c *Client, v api.Lease, sent time.Time, o acquireOptions) *Lease {
	l := &Lease{
		c: c, id: v.LeaseID, object: v.Object, typ: v.Type, info: v.Info, node: v.Node, token: v.Token,
		length: o.lease, lost: make(chan struct{}), changed: make(chan struct{}), kick: make(chan struct{}, 1),
		objects: v.Objects, semaphore: v.Semaphore, permit: -1, mode: v.Mode,
	}
	if l.mode == "" { // a sidecar older than shared locks
		l.mode = api.ModeExclusive
	}
	if v.Permit != nil {
		l.permit = *v.Permit
	}
	if l.length <= 0 {
		l.length = v.LeaseExpiresAt.Sub(v.AcquiredAt.Time)
	}
	if l.length <= 0 {
		l.length = 30 * time.Second
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.apply(v, sent)
	return l
}

// ID returns the lease id (the capability to renew and release it).
func (l *Lease) ID() string { return l.id }

// Object returns the locked object.
func (l *Lease) Object() string { return l.object }

// Objects returns the objects of a set's lease (AcquireAll), each with its
// own fencing token, in the order acquired; nil for any other lease. Fence
// each object's writes with its own token.
func (l *Lease) Objects() []api.LeaseObject { return slices.Clone(l.objects) }

// Semaphore returns the semaphore of a permit's lease (AcquirePermit), ""
// for any other lease.
func (l *Lease) Semaphore() string { return l.semaphore }

// Permit returns the permit a semaphore's lease holds (from 0), -1 for any
// other lease.
func (l *Lease) Permit() int { return l.permit }

// Type returns api.Foreground or api.Background.
func (l *Lease) Type() string { return l.typ }

// Mode returns the lock's mode: api.ModeExclusive or api.ModeShared (see
// WithShared).
func (l *Lease) Mode() string { return l.mode }

// Node returns the name of the lock's node in ZooKeeper.
func (l *Lease) Node() string { return l.node }

// Token returns the fencing token: hand it to the storage with every write.
func (l *Lease) Token() int64 { return l.token }

// Holds returns the lease's hold count as the sidecar last told it: 1, or
// more once re-entered (WithReentry); 0 once it ended.
func (l *Lease) Holds() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last.Holds
}

// Last returns the latest lease body the sidecar sent.
func (l *Lease) Last() api.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// ValidUntil returns the instant (this process's monotonic clock) until
// which the sidecar last confirmed the lock valid, counted from when that
// confirmation was requested. Zero once lost.
func (l *Lease) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostErr != nil {
		return time.Time{}
	}
	return l.validUntil
}

// ValidFor returns how long the lock is still certainly valid: check it
// before a critical write. It is 0 once the lock is lost.
func (l *Lease) ValidFor() time.Duration {
	return max(0, time.Until(l.ValidUntil()))
}

// Lost returns a channel closed when the lock is lost: the sidecar reported
// it lost (long-poll, renewal), or its validity ran out without a new
// confirmation. Err says why.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err returns nil until the lock is lost, then an error wrapping ErrLockLost
// (or ErrNoNode if the lease was released by someone else).
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostErr
}

// State returns the lease's state as the sidecar last told it:
// api.StateHeld, api.StateSuspect (ZooKeeper unreachable: the validity is
// not extended; finish or stop by ValidUntil), api.StateDraining (the
// sidecar is shutting down: finish by DrainUntil), api.StateLost or
// api.StateReleased.
func (l *Lease) State() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.lostErr != nil && errors.Is(l.lostErr, ErrNoNode):
		return api.StateReleased
	case l.lostErr != nil:
		return api.StateLost
	}
	return l.state
}

// Changed returns a channel closed at the next change of State (then call
// Changed again for the one after).
func (l *Lease) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// DrainUntil returns, while the sidecar drains (it is shutting down), the
// instant (this process's monotonic clock) past which no renewal extends
// the lock's validity: the end of sidecar.shutdown.grace, counted
// conservatively. Finish and release before it; at it the lock is
// reported lost. Zero when the sidecar is not draining.
func (l *Lease) DrainUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.drainUntil
}

// apply records an answer about the lease, requested at sent. The state is
// the latest received; the validity (and the end of a drain) comes from the
// answer to the latest request sent, counted from its send time: a
// long-poll's answer may come long after it was sent, so a state change it
// reports is followed by a renewal at once, for figures counted from a
// recent send time.
func (l *Lease) apply(v api.Lease, sent time.Time) {
	l.mu.Lock()
	if v.State != l.state {
		l.state = v.State
		close(l.changed)
		l.changed = make(chan struct{})
		if sent.Before(l.lastSent) {
			select {
			case l.kick <- struct{}{}:
			default:
			}
		}
	}
	if !sent.Before(l.lastSent) {
		l.last, l.lastSent = v, sent
		l.validUntil = sent.Add(time.Duration(v.ValidForMS) * time.Millisecond)
		l.drainUntil = time.Time{}
		if v.DrainEndsAt != nil {
			l.drainUntil = sent.Add(time.Duration(v.DrainForMS) * time.Millisecond)
		}
	}
	l.mu.Unlock()
	switch v.State {
	case api.StateLost:
		reason := v.Reason
		if reason == "" {
			reason = "lost"
		}
		l.markLost(&APIError{Status: http.StatusGone, Kind: api.LockLost, Reason: reason,
			Message: fmt.Sprintf("lease %s on %q is lost: %s", l.id, l.object, reason)})
	case api.StateReleased:
		l.markLost(fmt.Errorf("lease %s on %q was released: %w", l.id, l.object, ErrNoNode))
	}
}

func (l *Lease) markLost(err error) {
	l.lostOnce.Do(func() {
		if !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrNoNode) {
			err = fmt.Errorf("%w: %w", ErrLockLost, err)
		}
		l.mu.Lock()
		l.lostErr = err
		close(l.changed)
		l.changed = make(chan struct{})
		l.mu.Unlock()
		close(l.lost)
		l.cancel()
	})
}

func (l *Lease) startBackground() {
	l.mu.Lock()
	l.started = true
	l.mu.Unlock()
	l.wg.Go(l.keep)
	l.wg.Go(l.watch)
}

// stopBackground stops renewal and the loss watch and waits for them.
func (l *Lease) stopBackground() {
	l.cancel()
	l.wg.Wait()
	l.c.forget(l)
}

// Renew extends the lease (to the length it was acquired with) and
// refreshes its validity. A lost lease is an error wrapping ErrLockLost.
func (l *Lease) Renew(ctx context.Context) error {
	sent := time.Now()
	var v api.Lease
	_, err := l.c.send(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(l.id)+"/renew", api.RenewRequest{}, &v)
	if err != nil {
		if errors.Is(err, ErrLockLost) || errors.Is(err, ErrNoNode) {
			l.markLost(err)
		}
		return err
	}
	l.apply(v, sent)
	return l.Err()
}

// Release stops the background renewal and releases the lock. It returns an
// error wrapping ErrLockLost if the lock was lost before, ErrNoNode if the
// lease was already released.
func (l *Lease) Release(ctx context.Context) error {
	return l.release(ctx, "")
}

// ReleaseNoWait is Release in the sidecar's explicit answer-first mode
// (DELETE ?wait=false): it returns before ZooKeeper has the release's
// write. The lease has ended when it returns nil; the lock is freed when
// that write lands, and nobody is granted it before then (an acquire of
// the same object through the same sidecar is granted after it).
func (l *Lease) ReleaseNoWait(ctx context.Context) error {
	return l.release(ctx, "?wait=false")
}

func (l *Lease) release(ctx context.Context, query string) error {
	l.stopBackground()
	var v api.ReleaseResponse
	_, err := l.c.send(ctx, http.MethodDelete, "/v1/leases/"+url.PathEscape(l.id)+query, nil, &v)
	if err != nil {
		if errors.Is(err, ErrLockLost) {
			l.markLost(err)
		}
		return err
	}
	l.lostOnce.Do(func() { // not lost: released
		l.mu.Lock()
		l.validUntil, l.drainUntil = time.Time{}, time.Time{}
		l.last.State, l.state = api.StateReleased, api.StateReleased
		close(l.changed)
		l.changed = make(chan struct{})
		l.mu.Unlock()
	})
	return nil
}

// keep renews at a third of the lease, and often enough that the validity
// the sidecar confirms (bounded by the ZooKeeper session deadline) stays
// fresh: at half of what is left of it.
func (l *Lease) keep() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		left := time.Until(l.ValidUntil())
		if left <= 0 {
			if du := l.DrainUntil(); !du.IsZero() && !time.Now().Before(du.Add(-time.Second)) {
				l.markLost(fmt.Errorf("the sidecar is shutting down and the grace of its drain ended (%s)", api.ReasonShutdown))
				return
			}
			l.markLost(errors.New("validity ran out without a confirmation from the sidecar"))
			return
		}
		next := max(min(l.length/3, left/2), 20*time.Millisecond)
		t.Reset(min(next, left))
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		case <-l.kick:
			t.Stop()
		}
		if time.Until(l.ValidUntil()) <= 0 {
			continue // reported as lost above
		}
		ctx, cancel := context.WithTimeout(l.ctx, max(time.Until(l.ValidUntil()), 100*time.Millisecond))
		err := l.Renew(ctx)
		cancel()
		if l.ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrLockLost) || errors.Is(err, ErrNoNode) {
			return // markLost done by Renew
		}
		// other errors: retry at half the remaining validity
	}
}

// watch long-polls the sidecar for the lease leaving "held".
func (l *Lease) watch() {
	base := fmt.Sprintf("/v1/leases/%s?wait=lost&timeout_ms=%d", url.PathEscape(l.id), longPoll.Milliseconds())
	pause := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-l.ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for l.ctx.Err() == nil {
		// The state we last saw: a change since (a drain that began between
		// two polls) is answered at once, not at the next change.
		path := base
		l.mu.Lock()
		switch st := l.state; st {
		case api.StateHeld, api.StateSuspect, api.StateDraining, api.StatePreempted:
			path += "&state=" + st
		}
		l.mu.Unlock()
		sent := time.Now()
		var v api.Lease
		_, err := l.c.send(l.ctx, http.MethodGet, path, nil, &v)
		if l.ctx.Err() != nil {
			return
		}
		if err != nil {
			if errors.Is(err, ErrLockLost) || errors.Is(err, ErrNoNode) {
				l.markLost(err)
				return
			}
			if !pause(250 * time.Millisecond) {
				return
			}
			continue
		}
		l.apply(v, sent)
		if !pause(20 * time.Millisecond) { // a guard against a hot loop
			return
		}
	}
}
