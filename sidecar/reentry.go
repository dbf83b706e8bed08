package sidecar

import (
	"context"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
)

// resReentered is the baton_lock_acquire_seconds result of a re-entry.
const resReentered = "reentered"

// Re-entry (Curator's InterProcessMutex): an acquire that names, in
// "lease_id", a lease this sidecar holds on the same object gets that lease
// back with one more hold instead of waiting on itself; each release counts
// one hold down and the lock is freed at zero. Holds are local to the
// sidecar: ZooKeeper sees one grant, one token.

// reentrant returns the lease an acquire with lease_id re-enters, or the
// error to answer: a lease of another object, another run of the sidecar,
// or none at all is a 400 naming lease_id; a lost one answers 410 like a
// renewal would. shared is the mode asked for (default exclusive): a lease
// of the other mode is a 400 naming mode, so that a shared holder is never
// told it holds the object exclusively (no silent upgrade), nor the
// reverse.
func (t *leaseTable) reentrant(id, object string, shared bool) (*lease, error) {
	t.mu.Lock()
	l := t.leases[id]
	t.mu.Unlock()
	if l == nil {
		if m := leaseIDRE.FindStringSubmatch(id); m != nil && m[1] != t.inc {
			return nil, badRequest("lease_id", "lease %s was not granted by this run of this sidecar (incarnation %s, this one is %s): only a lease held "+
				"through this sidecar can be re-entered", id, m[1], t.inc)
		}
		if _, err := t.lookup(id); err != nil {
			if he, ok := err.(*httpError); ok && he.Body.Kind == api.LockLost {
				return nil, err
			}
		}
		return nil, badRequest("lease_id", "no lease %q is held through this sidecar (never granted, released, or not a lease id; an op delivery's "+
			"Baton-Lease-Id only while its delivery runs)", id)
	}
	if _, set := l.g.(*grantSet); set {
		return nil, badRequest("lease_id", "lease %s holds a set of objects: a set's lease cannot be re-entered", id)
	}
	if o := l.g.Object(); o != object {
		return nil, badRequest("lease_id", "lease %s holds %q, not %q: a lease re-enters only its own object", id, o, object)
	}
	if has := l.g.Shared(); has != shared {
		return nil, badRequest("mode", "lease %s holds a %s lock on %q and this re-entry asks for a %s one: a re-entry keeps the lease's mode "+
			"(give \"mode\":%q). A shared holder is not upgraded: other shared holders may hold %q with it; release the shared lease and "+
			"acquire exclusive", id, modeOf(has), object, modeOf(shared), modeOf(has), object)
	}
	return l, nil
}

// reenter adds a hold to l and renews it (to length, or its own length).
func (t *leaseTable) reenter(l *lease, length time.Duration) (api.Lease, error) {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return api.Lease{}, t.endedErr(l)
	}
	l.holds++
	n := l.holds
	l.mu.Unlock()
	if length == 0 {
		length = l.length
	}
	v, err := t.renew(l, length)
	if err != nil {
		l.mu.Lock()
		if !l.ended {
			l.holds--
		}
		l.mu.Unlock()
		return api.Lease{}, err
	}
	t.log.Debug("lease re-entered", "lease_id", l.id, "object", l.g.Object(), "token", l.g.Token(), "holds", n)
	// Not the original grant's wait: a client adds waited_ms to the time it
	// sent the request to place the validity, and this one did not wait.
	v.WaitedMS = 0
	return v, nil
}

// releaseHold counts one hold of l down when more than one is left (done:
// the release is answered with res); it refuses the last hold of an op
// delivery's lease, which the dispatcher releases.
func (t *leaseTable) releaseHold(l *lease) (res api.ReleaseResponse, done bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.ended:
		return res, false, nil
	case l.holds > 1:
		l.holds--
		t.log.Debug("lease hold released", "lease_id", l.id, "object", l.g.Object(), "token", l.g.Token(), "holds", l.holds)
		return api.ReleaseResponse{Released: false, Object: l.g.Object(), Token: l.g.Token(), Holds: l.holds}, true, nil
	case l.external:
		return res, true, newError(api.Conflict, "%s is the op delivery's own hold on %q: Baton releases it when the delivery ends (release only the "+
			"holds you re-entered)", l.id, l.g.Object())
	}
	return res, false, nil
}

// reasonDeliveryEnded is the reason a re-entered op delivery's lease is
// lost with when its delivery ended (the app answered) before its holds
// were released.
const reasonDeliveryEnded = "op delivery ended"

// HoldDelivery makes an op delivery's grant re-enterable while the app
// handles it. It returns the delivery's lease id (random like every lease
// id, sent only in the delivery's Baton-Lease-Id header, never listed nor
// logged while live): an acquire of the same object naming it gets this
// lease with one more hold, told valid for at
// most sidecar.app.preempt.cleanup ahead (what the dispatcher waits after
// a preemption before it cancels the delivery). The returned func ends it
// when the delivery is over, why in reason ("" when the app answered);
// the dispatcher then releases g. If holds the app re-entered are left,
// or a valid_until told about the lease (a GET, a renewal) is still
// ahead, the lease ends lost with that reason (410 to its holders) and
// done returns only after that valid_until. It is ops.Deps.Hold.
func (s *Server) HoldDelivery(g *lock.Grant) (id string, done func(reason string)) {
	return s.leases.holdDelivery(g)
}

// holdDelivery is Server.HoldDelivery.
func (t *leaseTable) holdDelivery(g *lock.Grant) (id string, done func(reason string)) {
	cfg := t.cfg()
	id = t.newID()
	l := &lease{id: id, g: g, length: cfg.LeaseDefault, expires: time.Now().Add(cfg.LeaseMax),
		done: make(chan struct{}), holds: 1, external: true, changed: make(chan struct{}), cleanup: cfg.AppPreemptCleanup}
	t.mu.Lock()
	if t.closed || t.leases[id] != nil {
		t.mu.Unlock()
		return id, func(string) {}
	}
	t.leases[id] = l
	t.deliveries++
	l.mu.Lock()
	l.stopLost = context.AfterFunc(g.Context(), func() { t.lost(l) })
	l.mu.Unlock()
	t.mu.Unlock()
	return id, func(reason string) {
		if reason == "" {
			reason = reasonDeliveryEnded
		}
		held := func() bool { return l.holds > 1 || l.told.After(time.Now()) }
		for l.holdsOf() > 0 {
			if ended, told := t.end(l, api.StateLost, reason, "the op delivery whose lease this is ended: "+reason, held, true); ended {
				t.log.Warn("op delivery ended while its lease was re-entered or told valid ahead: its holders are told lost; the lock is freed after the "+
					"validity told",
					"lease", logID(l.id), "object", l.g.Object(), "token", l.g.Token(), "reason", reason,
					"freed_in", max(0, time.Until(told)).Round(time.Millisecond))
				break
			}
			if t.finish(l, api.StateReleased, "", "", func() bool { return !held() }) {
				break
			}
		}
		// Ended here or before (a revocation: takeLease): the grant is
		// freed only after the validity told.
		t.mu.Lock()
		told, kept := t.revoked[l]
		t.mu.Unlock()
		if kept {
			t.waitTold(l, told)
			t.unrevoke(l)
		}
	}
}

// holdsOf returns the hold count of a live lease, 0 once ended.
func (l *lease) holdsOf() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return 0
	}
	return l.holds
}

// preemptibleOf reports whether l yields to a preemption (op deliveries do).
func (l *lease) preemptibleOf() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.preemptible || l.external
}
