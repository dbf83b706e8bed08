package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
)

// Priority preemption with cleanup (Apache Helix's priority lock): a
// foreground acquire with "preempt" writes a standing ask into the
// holder's privateLock (lock.Engine.Ask) before it queues. The holder's
// sidecar learns it through its holder watch; a preemptible lease is then
// told at once (state "preempted": long-polls return, the Go client's Lock
// cancels its fn, baton lock sends SIGTERM) and its validity is no longer
// extended past the preemption + its cleanup window. If it is not released
// within its cleanup — never shortened: preempt_wait_ms cannot take the
// holder's window away — and a forceful ask still stands then, the holder's
// sidecar takes the lease (lost, reason "preempted") and frees the lock
// after the validity told; without one it lifts the preemption (the holder
// renews as before) and a non-forceful requester answers 423.
//
// A preempting request must be able to use what it asks for: its wait_ms
// (and preempt_wait_ms, when given) must cover the holder's cleanup_ms plus
// PreemptMargin (preemptWaits), else it is refused with a 400 naming the
// field before anything is written. A requester that gives up (its wait
// ran out, 423, its client went away, the sidecar stops) withdraws its ask
// (lock.Engine.Withdraw) before it answers; the holder's sidecar, told by
// its watch (lock.KindWithdrawn), lifts the preemption when no other
// preemption stands: the lease is "held" again, a long-poll returns, and
// renewals extend it as before. Leases that are not preemptible and the
// plugin's holders are never asked: the requester waits as usual. Op
// deliveries yield the same way (the dispatcher cancels the request after
// sidecar.app.preempt.cleanup if an ask still stands then).

// Signal kinds of a preemption.
const (
	SignalPreempt         = "preempt"
	SignalPreemptForceful = "preempt-forceful"
)

// DefaultCleanup is the cleanup window of a preemptible acquire without
// cleanup_ms.
const DefaultCleanup = 5 * time.Second

// PreemptMargin is what a preempting request must be able to wait beyond
// the holder's cleanup window: the hand-over (the holder's release or the
// forceful take, then the grant) goes through ZooKeeper.
const PreemptMargin = time.Second

// preemptWaits checks that a preempting request can wait long enough to use
// a yield of a holder whose cleanup window is cleanup: wait (wait_ms, or the
// type's default, named by defaultKey when wait_ms was not given) and
// preemptWait (preempt_wait_ms, when given) must each be at least cleanup +
// PreemptMargin. With cleanup 0 it is the check that needs no holder.
func preemptWaits(wait time.Duration, waitGiven bool, defaultKey string, preemptWait *time.Duration, cleanup time.Duration) error {
	need := cleanup + PreemptMargin
	holder := fmt.Sprintf("the holder's cleanup_ms (%d) + %d", cleanup.Milliseconds(), PreemptMargin.Milliseconds())
	if cleanup == 0 {
		holder = fmt.Sprintf("%d + the holder's cleanup_ms", PreemptMargin.Milliseconds())
	}
	if wait < need {
		what := fmt.Sprintf("wait_ms %d", wait.Milliseconds())
		if !waitGiven {
			what = fmt.Sprintf("the default wait (%s = %d)", defaultKey, wait.Milliseconds())
		}
		if wait == 0 {
			what += " (try once)"
		}
		return badRequest("wait_ms", "%s with \"preempt\": true cannot wait for the holder to yield: a preempting acquire must wait at least %s = %d ms "+
			"(set wait_ms to that or more, or leave out preempt)",
			what, holder, need.Milliseconds())
	}
	if preemptWait != nil && *preemptWait < need {
		return badRequest("preempt_wait_ms", "%d is shorter than %s = %d ms: preempt_wait_ms cannot shorten the holder's cleanup window (set it to that "+
			"or more, or leave it out to wait wait_ms)",
			preemptWait.Milliseconds(), holder, need.Milliseconds())
	}
	return nil
}

// preemption applies the signals other requests write into the nodes of
// this sidecar's holders to their leases (onSignal): preemptions, each
// with a timer that takes the lease or lifts the preemption at the end of
// its cleanup window, their withdrawals, and revocations; and it writes and
// withdraws the preemption asks of this sidecar's waiting acquires. Its
// state is the leases' (leaseTable, lease.mu); its methods are safe for
// concurrent use.
type preemption struct {
	eng    *lock.Engine
	leases *leaseTable
	log    *slog.Logger
}

// onSignal is a lease grant's lock.AcquireOptions.OnSignal: a revocation
// written by any sidecar reaches the holder's here (from the engine's
// watch, which must not block).
func (p *preemption) onSignal(l *lease, sig lock.Signal) {
	switch sig.Kind {
	case SignalRevoke:
		p.leases.wg.Go(func() { p.leases.revoke(l, sig) })
	case SignalPreempt, SignalPreemptForceful:
		p.preempt(l, sig)
	case lock.KindWithdrawn:
		p.withdrawn(l, sig)
	}
}

// changedCh returns a channel closed at the next preemption change of l.
func (l *lease) changedCh() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// preemptStanding reports whether a preemption ask still stands on g, and
// whether a forceful one does. A preemption signal without an id (from an
// earlier Baton) stands until the grant ends.
func preemptStanding(g holding, sig lock.Signal) (any, forceful bool) {
	return preemptStandingIn(g.Asks(), sig)
}

// preemptStandingIn is preemptStanding over the asks given.
func preemptStandingIn(asks []lock.Signal, sig lock.Signal) (any, forceful bool) {
	if sig.ID == "" && (sig.Kind == SignalPreempt || sig.Kind == SignalPreemptForceful) {
		any, forceful = true, sig.Kind == SignalPreemptForceful
	}
	for _, a := range asks {
		switch a.Kind {
		case SignalPreemptForceful:
			return true, true
		case SignalPreempt:
			any = true
		}
	}
	return any, forceful
}

// preempt applies a preempt signal to l (from the engine's watch: it does
// not block).
func (p *preemption) preempt(l *lease, sig lock.Signal) {
	if !l.g.Standing(sig) {
		return // withdrawn before it reached this lease
	}
	if !l.preemptible || l.external {
		p.log.Info("preemption asked of a lease that is not preemptible: ignored", "object", l.g.Object(),
			"token", l.g.Token(), "from", sig.From, "by", sig.Reason)
		return
	}
	msg := "preempted by a request through sidecar " + sig.From
	if sig.Reason != "" {
		msg += ": " + sig.Reason
	}
	l.mu.Lock()
	if l.ended || !l.preemptAt.IsZero() {
		l.mu.Unlock()
		return
	}
	l.preemptAt, l.preemptMsg = time.Now(), msg
	l.preemptGen++
	gen := l.preemptGen
	close(l.changed)
	l.changed = make(chan struct{})
	d := l.cleanup // the holder's window, whatever the requester's preempt_wait_ms
	l.mu.Unlock()
	p.log.Info("lease preempted: its holder is told to roll back and release", "object", l.g.Object(),
		"token", l.g.Token(), "by", msg, "forceful", sig.Kind == SignalPreemptForceful, "deadline", d)
	p.leases.wg.Go(func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-l.done: // released (or lost) in time
			return
		case <-p.leases.drain.closing:
			return
		}
		l.mu.Lock()
		current := !l.ended && l.preemptGen == gen
		l.mu.Unlock()
		if !current {
			return // withdrawn meanwhile (and perhaps preempted again: that one has its own timer)
		}
		if _, forceful := preemptStanding(l.g, sig); forceful && p.forcefulRequesterWaits(l, sig) {
			if told, ok := p.leases.take(l, api.ReasonPreempted, msg+" (forceful: not released within its cleanup)"); ok {
				p.log.Warn("preempted lease taken: not released in time; the lock is freed after the validity told to it",
					"lease", logID(l.id), "object", l.g.Object(), "token", l.g.Token(), "freed_in", max(0, time.Until(told)).Round(time.Millisecond))
			}
			return
		}
		if p.lift(l, gen) {
			p.log.Info("preemption lifted: no forceful request insisted", "object", l.g.Object(), "token", l.g.Token())
		}
	})
}

// lift returns l from preempted to held, if its preemption is
// still the one numbered gen (0: any).
func (p *preemption) lift(l *lease, gen int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || l.preemptAt.IsZero() || (gen != 0 && l.preemptGen != gen) {
		return false
	}
	l.preemptAt, l.preemptMsg = time.Time{}, ""
	l.preemptGen++
	close(l.changed)
	l.changed = make(chan struct{})
	return true
}

// withdrawn applies the withdrawal of a preemption ask to l: when no
// other preemption stands, the holder may go on (state held again).
func (p *preemption) withdrawn(l *lease, sig lock.Signal) {
	if standing, _ := preemptStanding(l.g, lock.Signal{}); standing {
		return
	}
	if p.lift(l, 0) {
		p.log.Info("preemption withdrawn: its requester gave up; the holder may go on", "object", l.g.Object(),
			"token", l.g.Token(), "from", sig.From, "by", sig.Reason)
	}
}

// preemptAsk is a standing preemption ask this sidecar wrote for a waiting
// acquire, to withdraw if it gives up.
type preemptAsk struct {
	object string
	token  int64  // the holder's
	id     string // the ask's
}

// errNotPreemptible makes ask write nothing to a holder that is not
// preemptible.
var errNotPreemptible = errors.New("the holder is not preemptible")

// ask is the preempting side: it writes a preemption ask into the
// object's current holder if it is preemptible and check (preemptWaits
// with its cleanup) passes. It returns the ask to withdraw if the request
// gives up, nil when nothing was asked (free, not preemptible, plugin
// holders, failures: the request waits as usual), or check's error. req is
// the request id the acquire queues with (lock.Signal.Req).
func (p *preemption) ask(ctx context.Context, obj, info string, forceful bool, wait time.Duration, caller, req string,
	check func(cleanup time.Duration) error) (*preemptAsk, error) {
	kind := SignalPreempt
	if forceful {
		kind = SignalPreemptForceful
	}
	reason := info
	if reason == "" {
		reason = "a foreground request"
	}
	sctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	n, sig, err := p.eng.Ask(sctx, obj, lock.Signal{Kind: kind, Reason: reason, Who: caller, From: p.leases.cfg().NodeID, WaitMS: wait.Milliseconds(), Req: req},
		func(h *lock.Node) error {
			if !h.Preemptible {
				return errNotPreemptible
			}
			return check(h.Cleanup)
		})
	var he *httpError
	switch {
	case err == nil:
		p.log.Info("preemption asked", "object", obj, "holder", n.Name, "holder_sidecar", n.Sidecar, "token", n.Token,
			"forceful", forceful, "holder_cleanup", n.Cleanup, "caller", caller)
		return &preemptAsk{object: obj, token: n.Token, id: sig.ID}, nil
	case errors.As(err, &he):
		return nil, err
	case errors.Is(err, lock.ErrNoNode):
	case errors.Is(err, errNotPreemptible):
		p.log.Debug("preemption not asked: the holder is not preemptible; waiting as usual", "object", obj)
	case errors.Is(err, lock.ErrNotSignallable):
		p.log.Info("preemption not asked: the holder is not a Baton grant (the plugin's); waiting as usual", "object", obj)
	default:
		p.log.Warn("preemption could not be asked; waiting as usual", "object", obj, "err", err)
	}
	return nil, nil
}

// withdraw removes a's ask from its holder (the requester gave up), bounded
// by inspectTimeout whatever ctx's state: the holder may go on.
func (p *preemption) withdraw(ctx context.Context, a *preemptAsk, why string) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), inspectTimeout)
	defer cancel()
	if err := p.eng.Withdraw(wctx, a.object, a.token, a.id); err != nil {
		p.log.Warn("preemption could not be withdrawn: the holder stays preempted until its cleanup window ends", "object", a.object,
			"token", a.token, "why", why, "err", err)
		return
	}
	p.log.Info("preemption withdrawn: the requester gave up", "object", a.object, "token", a.token, "why", why)
}

func preemptReason(wait time.Duration) string {
	return fmt.Sprintf("preemption: the holder did not yield within preempt_wait_ms (%v)", wait)
}

// forcefulRequesterWaits reports whether a forceful ask on l still has its
// requester waiting in line for the object (lock.Grant.LiveAsks): one that
// died without withdrawing its ask (its sidecar killed, its session lost)
// must not get the holder taken for nobody. A requester writes its ask just
// before it queues, so a first answer of "gone" is checked again a second
// later; the asks of requesters still gone then are withdrawn here, and the
// holder goes on (its preemption lifted by the caller).
func (p *preemption) forcefulRequesterWaits(l *lease, sig lock.Signal) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for try := 0; ; try++ {
		if _, forceful := preemptStandingIn(l.g.LiveAsks(ctx), sig); forceful {
			return true
		}
		if try == 1 {
			break
		}
		select {
		case <-time.After(time.Second):
		case <-l.done:
			return false
		case <-p.leases.drain.closing:
			return false
		}
	}
	live := map[string]bool{}
	for _, a := range l.g.LiveAsks(ctx) {
		live[a.ID] = true
	}
	for _, a := range l.g.Asks() {
		if a.Kind == SignalPreemptForceful && !live[a.ID] {
			p.log.Warn("forceful preemption dropped: its requester no longer waits (its sidecar or session is gone)",
				"object", l.g.Object(), "token", l.g.Token(), "from", a.From, "by", a.Reason)
			if err := p.eng.Withdraw(ctx, l.g.Object(), l.g.Token(), a.ID); err != nil {
				p.log.Warn("withdrawing a dead requester's ask failed", "object", l.g.Object(), "error", err)
			}
		}
	}
	return false
}
