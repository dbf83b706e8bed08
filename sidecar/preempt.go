package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
)

// Priority preemption with cleanup (Apache Helix's priority lock): a
// foreground acquire with "preempt" writes a preempt signal into the
// holder's privateLock (lock.Engine.Signal) before it queues. The holder's
// sidecar learns it through its holder watch; a preemptible lease is then
// told at once (state "preempted": long-polls return, the Go client's Lock
// cancels its fn, baton lock sends SIGTERM) and its validity is no longer
// extended past the preemption + its cleanup window. If it is not released
// within min(cleanup, the requester's preempt_wait): a forceful requester's
// signal makes the holder's sidecar take the lease (lost, reason
// "preempted") and free the lock after the validity told; a non-forceful
// one lifts the preemption (the holder renews as before) and the requester
// answers 423. Leases that are not preemptible and the plugin's holders
// ignore the signal: the requester waits as usual. Op deliveries yield
// (the dispatcher cancels the request after sidecar.app.preempt.cleanup).

// Signal kinds of a preemption.
const (
	SignalPreempt         = "preempt"
	SignalPreemptForceful = "preempt-forceful"
)

// DefaultCleanup is the cleanup window of a preemptible acquire without
// cleanup_ms.
const DefaultCleanup = 5 * time.Second

// changedCh returns a channel closed at the next preemption change of l.
func (l *lease) changedCh() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// preempt applies a preempt signal to l (from the engine's watch: it does
// not block).
func (s *Server) preempt(l *lease, sig lock.Signal) {
	if !l.preemptible || l.external {
		s.log.Info("preemption asked of a lease that is not preemptible: ignored", "lease_id", l.id, "object", l.g.Object(),
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
	close(l.changed)
	l.changed = make(chan struct{})
	cleanup := l.cleanup
	l.mu.Unlock()
	d := cleanup
	if w := time.Duration(sig.WaitMS) * time.Millisecond; w > 0 && w < d {
		d = w
	}
	forceful := sig.Kind == SignalPreemptForceful
	s.log.Info("lease preempted: its holder is told to roll back and release", "lease_id", l.id, "object", l.g.Object(),
		"token", l.g.Token(), "by", msg, "forceful", forceful, "deadline", d)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-l.done: // released (or lost) in time
			return
		case <-s.closing:
			return
		}
		if forceful {
			if told, ok := s.takeLease(l, api.ReasonPreempted, msg+" (forceful: not released within its cleanup)"); ok {
				s.log.Warn("preempted lease taken: not released in time; the lock is freed after the validity told to it",
					"lease_id", l.id, "object", l.g.Object(), "token", l.g.Token(), "freed_in", max(0, time.Until(told)).Round(time.Millisecond))
			}
			return
		}
		l.mu.Lock()
		if !l.ended {
			l.preemptAt, l.preemptMsg = time.Time{}, ""
			close(l.changed)
			l.changed = make(chan struct{})
		}
		l.mu.Unlock()
		s.log.Info("preemption lifted: the requester did not insist", "lease_id", l.id, "object", l.g.Object())
	}()
}

// askToYield is the preempting side: it writes the preempt signal into the
// object's current holder. It returns whether a Baton holder was asked
// (free, plugin holders and failures: no, the request waits as usual).
func (s *Server) askToYield(ctx context.Context, obj string, req api.AcquireRequest, wait time.Duration, caller string) bool {
	kind := SignalPreempt
	if req.Forceful {
		kind = SignalPreemptForceful
	}
	reason := req.Info
	if reason == "" {
		reason = "a foreground request"
	}
	sctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	n, err := s.eng.Signal(sctx, obj, 0, lock.Signal{Kind: kind, Reason: reason, Who: caller, From: s.config().NodeID, WaitMS: wait.Milliseconds()})
	switch {
	case err == nil:
		s.log.Info("preemption asked", "object", obj, "holder", n.Name, "holder_sidecar", n.Sidecar, "token", n.Token,
			"forceful", req.Forceful, "preempt_wait", wait, "caller", caller)
		return true
	case errors.Is(err, lock.ErrNoNode):
	case errors.Is(err, lock.ErrNotSignallable):
		s.log.Info("preemption not asked: the holder is not a Baton grant (the plugin's); waiting as usual", "object", obj)
	default:
		s.log.Warn("preemption could not be asked; waiting as usual", "object", obj, "err", err)
	}
	return false
}

func preemptReason(wait time.Duration) string {
	return fmt.Sprintf("preemption: the holder did not yield within preempt_wait_ms (%v)", wait)
}
