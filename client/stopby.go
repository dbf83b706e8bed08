package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/batonhq/baton/api"
)

// DefaultStopGrace is the grace of Lock's stop-by signal when WithStopGrace
// is not given: as `baton lock --kill-grace`, 5 s.
const DefaultStopGrace = 5 * time.Second

// stopMargin is the least time before the end of the last confirmed
// validity at which an unreachable sidecar stops a holder (whatever the
// grace): the time for the holder to be told and scheduled.
const stopMargin = 100 * time.Millisecond

// ErrValidityEnding is the cause of Lock's fn context (and a StopNow's Err)
// when the lock is still valid but its validity will not be extended and
// ends within the grace: ZooKeeper is unreachable (the lease is suspect),
// the sidecar drains or does not answer. Finish or roll back, and return
// before Lease.ValidUntil.
var ErrValidityEnding = errors.New("client: the lock's validity is ending")

// StopCause is what calls for a holder to stop.
type StopCause int

// Causes of a stop.
const (
	// CauseSuspect: ZooKeeper is unreachable; the sidecar reports the lease
	// suspect and no longer extends its validity.
	CauseSuspect StopCause = iota + 1
	// CauseDraining: the sidecar is shutting down; the validity is not
	// extended past the end of its sidecar.shutdown.grace (Lease.DrainUntil).
	CauseDraining
	// CausePreempted: a higher-priority request asked the (preemptible)
	// lock to yield within its cleanup window (the validity told).
	CausePreempted
	// CauseUnreachable: the sidecar does not answer and the last validity it
	// confirmed is ending.
	CauseUnreachable
	// CauseLost: the lock is lost (the sidecar said so: deleted, session
	// lost, revoked, shut down; or its validity ran out unconfirmed).
	CauseLost
)

// String describes the cause, for messages.
func (c StopCause) String() string {
	switch c {
	case CauseSuspect:
		return "ZooKeeper is unreachable (the sidecar reports the lock suspect: its validity is no longer extended)"
	case CauseDraining:
		return "the sidecar is draining (shutting down): the lock is renewed until the end of its grace, not after"
	case CausePreempted:
		return "preempted by a higher-priority request"
	case CauseUnreachable:
		return "the sidecar is unreachable"
	case CauseLost:
		return "the lock is lost"
	}
	return fmt.Sprintf("StopCause(%d)", int(c))
}

// StopKind is what a StopEvent tells the holder.
type StopKind int

// Kinds of StopEvent.
const (
	// StopScheduled: the lock's validity is no longer extended (CauseSuspect
	// or CauseDraining); a StopNow follows at At (End − grace) unless the
	// lease is held again first (StopCalledOff).
	StopScheduled StopKind = iota + 1
	// StopNow: stop now, and be done by By. Given again, with the same or
	// an earlier By, when the end moves closer.
	StopNow
	// StopCalledOff: the lease is held again (ZooKeeper answered, or the
	// preempting request gave up): what was scheduled for Cause no longer
	// applies; if Stopped, a StopNow given for it is withdrawn too (the
	// holder may go on: the lock is valid and renewed).
	StopCalledOff
	// StopReleased: the lease was released by someone else with its id
	// (e.g. a command run by `baton lock`). The lock is no longer held; it
	// is for the holder to decide whether to go on without it (Lock stops
	// its fn).
	StopReleased
)

// StopEvent is one step of a holder's stop-by signal (Lease.StopBy). Times
// are on this process's monotonic clock, as Lease.ValidUntil.
type StopEvent struct {
	Kind  StopKind
	Cause StopCause // Scheduled, Now, CalledOff: what calls (or called) for the stop
	// Err says why: for StopNow it wraps ErrValidityEnding (suspect,
	// draining, unreachable), ErrPreempted, or is the loss (wrapping
	// ErrLockLost); for StopReleased it wraps ErrNoNode. It is the cause
	// of Lock's fn context.
	Err error
	// End is the end of the lock's validity as last confirmed (zero in
	// StopCalledOff and StopReleased). After CauseLost it is the last one
	// confirmed before the loss, or now if the validity ran out unconfirmed.
	End time.Time
	// At (StopScheduled) is when the StopNow is due: End minus the grace.
	At time.Time
	// By (StopNow) is when the holder must be stopped: End, except after a
	// loss the sidecar reported: the grace from now, but not past End.
	By time.Time
	// Stopped (StopCalledOff) says a StopNow given for Cause is withdrawn.
	Stopped bool
}

// StopBy is a holder's stop-by signal: it follows a lease and tells the
// holder to stop a grace before the lock's validity ends — not at the
// instant it ends — whenever that validity is no longer extended, and at
// once when the lock is lost or preempted. Events says when:
//
//   - the lease is suspect (ZooKeeper unreachable) or draining (the
//     sidecar shuts down): StopScheduled at once, StopNow at the end of
//     the validity (Lease.ValidUntil, Lease.DrainUntil) minus the grace,
//     both called off (StopCalledOff) if the lease is held again first;
//   - the sidecar does not answer (it is probed every grace/5, between
//     100 ms and 1 s) and the last validity it confirmed minus the grace
//     (at least 100 ms) is reached: StopNow;
//   - the lock is preempted: StopNow, to be done by the end of the
//     validity told (the cleanup window); called off if the requester
//     gives up;
//   - the lock is lost (the sidecar reports it lost, or revoked, or its
//     validity ran out unconfirmed): StopNow, with a grace from now but
//     not past the last confirmed validity;
//   - the lease was released by someone else: StopReleased.
//
// Lock cancels its fn's context at the first StopNow (or StopReleased);
// `baton lock` sends SIGTERM then and SIGKILL at By. Close stops it.
type StopBy struct {
	l      *Lease
	grace  time.Duration
	events chan StopEvent
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// Owned by run.
	lastVU    time.Time // the latest confirmed validity (kept after a loss)
	window    StopCause // CauseSuspect or CauseDraining while the validity is not extended; 0: not
	windowEnd time.Time // the earliest end told in the window
	termAt    time.Time // when the window's StopNow is due (zero: not scheduled)
	termT     *time.Timer
	stopped   bool // a StopNow was given and not called off
	byWindow  bool // it was given by the window or a preemption: held again calls it off
	byPreempt bool // it was given by a preemption
}

// StopBy starts the lease's stop-by signal with the given grace (0: at the
// end of the validity; `baton lock --kill-grace`, Lock's WithStopGrace).
// Read Events until done with it, then Close it. It probes the sidecar
// while it runs (GET /healthz).
func (l *Lease) StopBy(grace time.Duration) *StopBy {
	s := &StopBy{l: l, grace: max(grace, 0), events: make(chan StopEvent)}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Go(func() { s.run(ctx) })
	return s
}

// Events returns the channel of the signal's events. Nothing is dropped:
// the signal waits until each is read (or Close).
func (s *StopBy) Events() <-chan StopEvent { return s.events }

// Close stops the signal and waits for it. Safe to call more than once.
func (s *StopBy) Close() {
	s.cancel()
	s.wg.Wait()
}

// run follows the lease until ctx ends.
func (s *StopBy) run(ctx context.Context) {
	unreachable := make(chan time.Time, 1)
	var wg sync.WaitGroup
	wctx, stopWatch := context.WithCancel(ctx)
	wg.Go(func() { watchSidecar(wctx, s.l, s.grace, unreachable) })
	defer func() {
		stopWatch()
		wg.Wait()
	}()
	s.termT = time.NewTimer(time.Hour)
	s.termT.Stop()
	defer s.termT.Stop()
	l := s.l
	lost, changed := l.Lost(), l.Changed()
	s.lastVU = l.ValidUntil()
	emit := func(ev StopEvent) bool {
		if ev.Kind == StopNow {
			s.stopped = true
		}
		select {
		case s.events <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !s.check(emit) {
		return
	}
	tick := time.NewTicker(100 * time.Millisecond) // the validity may move without a change of state
	defer tick.Stop()
	for {
		ok := true
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if vu := l.ValidUntil(); vu.After(s.lastVU) {
				s.lastVU = vu
			}
			ok = s.check(emit)
		case <-changed:
			changed = l.Changed()
			ok = s.check(emit)
		case <-s.termT.C:
			s.termAt = time.Time{}
			s.byWindow = !s.stopped
			ok = emit(StopEvent{Kind: StopNow, Cause: s.window, End: s.windowEnd, By: s.windowEnd,
				Err: s.ending("%s, and the lock's validity ends in %v", s.window, s.windowEnd)})
		case <-lost:
			lost = nil
			s.byWindow = false
			err := l.Err()
			if errors.Is(err, ErrNoNode) {
				if !emit(StopEvent{Kind: StopReleased, Err: err}) {
					return
				}
				continue
			}
			// A grace from now, but not past the last confirmed validity:
			// past it the lock can be granted elsewhere.
			now := time.Now()
			end, by := s.lastVU, now.Add(s.grace)
			if _, reported := errors.AsType[*APIError](err); !reported {
				// The validity ran out without a confirmation: the lock may
				// be granted elsewhere now.
				end, by = now, now
			} else if end.Before(by) {
				by = end
			}
			ok = emit(StopEvent{Kind: StopNow, Cause: CauseLost, Err: err, End: end, By: by})
		case vu := <-unreachable:
			ok = emit(StopEvent{Kind: StopNow, Cause: CauseUnreachable, End: vu, By: vu,
				Err: s.ending("the sidecar is unreachable and the lock's validity ends in %v", vu)})
		}
		if !ok {
			return
		}
	}
}

// ending is an error wrapping ErrValidityEnding: "lock X: <format>"; the
// last argument is the end of the validity, shown as the time left.
func (s *StopBy) ending(format string, args ...any) error {
	if n := len(args) - 1; n >= 0 {
		if end, ok := args[n].(time.Time); ok {
			args[n] = time.Until(end).Round(time.Millisecond)
		}
	}
	return &stopError{msg: fmt.Sprintf("client: lock %q: ", s.l.object) + fmt.Sprintf(format, args...), err: ErrValidityEnding}
}

type stopError struct {
	msg string
	err error
}

func (e *stopError) Error() string { return e.msg }
func (e *stopError) Unwrap() error { return e.err }

// check follows the lease's state: while it is suspect or draining the
// validity is not extended past a known instant, so a StopNow is scheduled
// at that instant minus the grace (StopScheduled). When the lease is held
// again first, the schedule is called off, and a StopNow the window or a
// preemption gave. It returns false when the signal is closed.
func (s *StopBy) check(emit func(StopEvent) bool) bool {
	l := s.l
	var end time.Time
	var cause StopCause
	switch l.State() {
	case api.StateSuspect:
		end, cause = l.ValidUntil(), CauseSuspect
	case api.StateDraining:
		end, cause = l.DrainUntil(), CauseDraining
	case api.StatePreempted:
		// Stop now (roll back and return), by the validity told, which
		// renewals no longer extend.
		if s.stopped {
			return true
		}
		s.byWindow, s.byPreempt = true, true
		vu := l.ValidUntil()
		return emit(StopEvent{Kind: StopNow, Cause: CausePreempted, End: vu, By: vu,
			Err: fmt.Errorf("%w (%s); finish by %v", ErrPreempted, l.Last().Reason, time.Until(vu).Round(time.Millisecond))})
	case api.StateHeld:
		calledOff := s.stopped && s.byWindow
		window := s.window
		s.window, s.windowEnd = 0, time.Time{}
		if !s.termAt.IsZero() {
			s.termT.Stop()
			s.termAt = time.Time{}
		}
		preempt := s.byPreempt
		if calledOff {
			s.stopped, s.byWindow, s.byPreempt = false, false, false
		}
		if window != 0 && !emit(StopEvent{Kind: StopCalledOff, Cause: window, Stopped: calledOff && !preempt}) {
			return false
		}
		if calledOff && preempt {
			return emit(StopEvent{Kind: StopCalledOff, Cause: CausePreempted, Stopped: true})
		}
		return true
	default: // lost or released: the loss path tells it
		return true
	}
	if end.IsZero() {
		return true
	}
	opened, moved := s.window != cause, s.windowEnd.IsZero() || end.Before(s.windowEnd)
	if opened && !emit(StopEvent{Kind: StopScheduled, Cause: cause, End: end, At: end.Add(-s.grace),
		Err: s.ending("%s; it ends in %v", cause, end)}) {
		return false
	}
	s.window = cause
	if moved {
		s.windowEnd = end
	}
	if s.stopped {
		// Told to stop already: to be done no later than the end.
		if !opened && !moved {
			return true
		}
		return emit(StopEvent{Kind: StopNow, Cause: cause, End: s.windowEnd, By: s.windowEnd,
			Err: s.ending("%s, and the lock's validity ends in %v", cause, s.windowEnd)})
	}
	termAt := s.windowEnd.Add(-s.grace)
	if s.termAt.IsZero() || termAt.Before(s.termAt) {
		s.termAt = termAt
		s.termT.Reset(max(0, time.Until(termAt)))
	}
	return true
}

// watchSidecar probes the sidecar. When it does not answer and the lease's
// last confirmed validity minus the grace (at least stopMargin) is
// reached, it sends that validity on out and returns. The lease's own
// renewal and long-poll report losses the sidecar sees; this covers a
// sidecar that is gone or frozen.
func watchSidecar(ctx context.Context, l *Lease, grace time.Duration, out chan<- time.Time) {
	every := min(max(grace/5, 100*time.Millisecond), time.Second)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next := every
		if !probe(ctx, l.c, every) {
			vu := l.ValidUntil()
			if ctx.Err() != nil {
				return
			}
			if !vu.IsZero() { // zero: lost, reported by Lost()
				left := time.Until(vu) - max(grace, stopMargin)
				if left <= 0 {
					out <- vu
					return
				}
				next = min(next, left)
			}
		}
		t.Reset(next)
	}
}

// probe reports whether the sidecar answers /healthz within timeout
// (at least 500 ms).
func probe(ctx context.Context, c *Client, timeout time.Duration) bool {
	pctx, cancel := context.WithTimeout(ctx, max(timeout, 500*time.Millisecond))
	defer cancel()
	_, err := c.Health(pctx)
	if ae, ok := errors.AsType[*APIError](err); ok && ae.Status != http.StatusServiceUnavailable {
		return true // it answered
	}
	return err == nil
}
