package ops

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v4"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/queue"
	"github.com/batonhq/baton/retry"
)

// NameLockLost is the error class of an attempt whose background lock was
// lost while the app was handling it (the delivery is cancelled; retryable).
const NameLockLost = "LockLost"

// work is one worker: claim, lock, deliver, record; until the soft stop.
func (d *Dispatcher) work(n int) {
	log := d.log.With("worker", n)
	for {
		if d.soft.Err() != nil || !d.waitConnected() {
			return
		}
		// Claims a runnable op even if soft has ended (checked above), and
		// only while the engine is connected: no op is claimed that cannot
		// be locked.
		op, err := d.store.NextWhen(d.soft, d.connected, pausePoll)
		if err != nil {
			if d.soft.Err() != nil || errors.Is(err, queue.ErrClosed) {
				return
			}
			log.Error("claiming an op failed; retrying in 1s", "error", err)
			if !sleepCtx(d.soft, time.Second) {
				return
			}
			continue
		}
		d.m.transition(queue.Running)
		d.attempt(log, op)
	}
}

// waitConnected blocks while the engine has no ZooKeeper session, so that
// workers do not claim ops they cannot lock (no attempt is counted while
// ZooKeeper is unavailable). It returns false on the soft stop.
func (d *Dispatcher) waitConnected() bool {
	if d.connected() {
		return true
	}
	t := time.NewTicker(pausePoll)
	defer t.Stop()
	for {
		select {
		case <-d.soft.Done():
			return false
		case <-t.C:
			if d.connected() {
				return true
			}
		}
	}
}

// connected reports whether the engine has a ZooKeeper session, logging
// when the workers pause and resume.
func (d *Dispatcher) connected() bool {
	if d.eng.Health().Connected {
		d.resumed()
		return true
	}
	if d.paused.CompareAndSwap(false, true) {
		if d.everConnected.Load() {
			d.log.Warn("zookeeper unavailable: workers pause; no attempt is counted until it is back")
		} else {
			d.log.Info("workers wait for the first zookeeper session")
		}
	}
	return false
}

func (d *Dispatcher) resumed() {
	d.everConnected.Store(true)
	if d.paused.CompareAndSwap(true, false) {
		d.log.Info("zookeeper connected: workers resume")
	}
}

// unavailable reports whether an acquire error means ZooKeeper (not the
// object) was the problem: such an attempt is not counted.
func (d *Dispatcher) unavailable(err error) bool {
	if errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrSessionLost) || errors.Is(err, lock.ErrClosed) {
		return true
	}
	// A wait that ran out while disconnected says nothing about the object.
	if _, ok := errors.AsType[*lock.InstanceLockError](err); ok && !d.eng.Health().Connected {
		return true
	}
	return false
}

// attempt makes one delivery attempt of a claimed (running) op and records
// its outcome.
func (d *Dispatcher) attempt(log *slog.Logger, op queue.Op) {
	set := d.set.Load()
	ev := event{ID: op.ID, Object: op.Object, Attempt: op.Attempts + 1, Start: time.Now()}
	log = log.With("op_id", op.ID, "object", op.Object, "attempt", ev.Attempt)

	if !d.eng.Health().Connected {
		d.giveBack(log, op, ev, "zookeeper not connected")
		return
	}
	// A preempting foreground acquire (any sidecar) asks the grant to yield
	// through its privateLock; deliver cancels the request after the
	// cleanup (sidecar.app.preempt.cleanup) and the op is given back. An
	// operator's revocation cancels it at once, given back too.
	preempt := make(chan lock.Signal, 1)
	ao := lock.AcquireOptions{Info: lockInfo(op), Wait: set.lockWait, OnSignal: func(sig lock.Signal) {
		if sig.Kind == signalRevoke {
			log.Warn("audit: op delivery revoked: its request is cancelled and the op given back (not counted)",
				"reason", sig.Reason, "caller", sig.Who, "requested_through", sig.From)
		}
		if strings.HasPrefix(sig.Kind, signalPreempt) || sig.Kind == signalRevoke {
			for {
				select {
				case preempt <- sig:
					return
				default:
				}
				if sig.Kind != signalRevoke {
					return // one pending is enough: deliver checks the standing asks
				}
				select { // a revocation is never dropped: it replaces a pending preemption
				case <-preempt:
				default:
				}
			}
		}
	}}
	// Recorded in the nodes: a preempting requester must be able to wait
	// this cleanup window (see the sidecar's preempt.go).
	ao.Preemptible, ao.Cleanup = true, set.cleanup
	if set.lockWait == 0 {
		ao.TryOnce = true
	}
	g, err := d.eng.Acquire(d.soft, op.Object, lock.Background, ao)
	if err != nil {
		switch {
		case d.soft.Err() != nil:
			d.giveBack(log, op, ev, "shutting down")
		case d.unavailable(err):
			d.giveBack(log, op, ev, "zookeeper unavailable: "+err.Error())
		case errors.Is(err, lock.ErrInvalidObject): // cannot succeed by repetition
			d.fail(log, op, ev, set, &retry.Error{Class: retry.Permanent, Name: "InvalidObject", Err: err})
		default:
			d.fail(log, op, ev, set, err)
		}
		return
	}
	ev.Token = g.Token()
	started := time.Now()
	out := d.deliver(op, g, set, preempt)
	d.m.delivery.WithLabelValues(deliveryResult(out)).Observe(time.Since(started).Seconds())
	rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	switch rerr := g.Release(rctx); {
	case rerr == nil, errors.Is(rerr, lock.ErrClosed):
	case errors.Is(rerr, lock.ErrLockLost): // the engine reported it; a delivery in progress was cancelled
		log.Debug("background lock already lost at release", "token", g.Token(), "error", rerr)
	default:
		log.Warn("releasing the background lock failed", "token", g.Token(), "error", rerr)
	}
	cancel()
	switch {
	case out.cutShort:
		d.giveBack(log, op, ev, "delivery cut short: "+out.err.Error())
	case out.err == nil:
		d.succeed(log, op, ev, out.status)
	default:
		d.fail(log, op, ev, set, out.err)
	}
}

func (d *Dispatcher) storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), storeTimeout)
}

// giveBack returns a running op to the queue without counting the attempt.
func (d *Dispatcher) giveBack(log *slog.Logger, op queue.Op, ev event, why string) {
	if err := d.record(log, "giving the op back to the queue", func(ctx context.Context) error {
		return d.store.Requeue(ctx, op.ID)
	}); err != nil {
		log.Error("giving the op back to the queue failed; it is queued again after a restart", "reason", why, "error", err)
		return
	}
	log.Debug("op given back to the queue, attempt not counted", "reason", why)
	d.m.transition(queue.Queued)
	ev.End, ev.Outcome, ev.ErrorMsg = time.Now(), "requeued", why
	d.emit(ev)
}

func (d *Dispatcher) succeed(log *slog.Logger, op queue.Op, ev event, status int) {
	if err := d.record(log, "recording a delivered op", func(ctx context.Context) error {
		return d.store.Done(ctx, op.ID)
	}); err != nil {
		log.Error("recording a delivered op failed; it will be delivered again after a restart", "error", err)
		return
	}
	log.Debug("op delivered", "status", status, "token", ev.Token, "took", time.Since(ev.Start))
	d.m.transition(queue.Done)
	d.m.attempts.Observe(float64(ev.Attempt))
	ev.End, ev.Outcome = time.Now(), "done"
	d.emit(ev)
}

// record runs a state write of a claimed op until it succeeds, retrying
// failures (a full or failing disk) with backoff (recordBackoffMin doubling
// to recordBackoffMax) until the dispatcher's hard stop: an op must not stay
// running, holding back its object, because one write failed. Errors that
// repetition cannot mend (the op is not in the expected state, unknown, the
// store closed) end it at once. It returns the last error.
func (d *Dispatcher) record(log *slog.Logger, what string, write func(context.Context) error) error {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(recordBackoffMin), backoff.WithMaxInterval(recordBackoffMax),
		backoff.WithMaxElapsedTime(0))
	for tries := 1; ; tries++ {
		ctx, cancel := d.storeCtx()
		err := write(ctx)
		cancel()
		if err == nil {
			if tries > 1 {
				log.Info(what+" succeeded after failures", "tries", tries)
			}
			return nil
		}
		if errors.Is(err, queue.ErrState) || errors.Is(err, queue.ErrNotFound) || errors.Is(err, queue.ErrClosed) {
			return err
		}
		wait := b.NextBackOff()
		if tries == 1 {
			log.Error(what+" failed; retrying until it succeeds", "error", err, "retry_in", wait.Round(time.Millisecond))
		} else {
			log.Debug(what+" still fails", "error", err, "tries", tries, "retry_in", wait.Round(time.Millisecond))
		}
		d.m.storeRetries.Inc()
		if !sleepCtx(d.hard, wait) {
			return fmt.Errorf("%w (given up at shutdown after %d tries)", err, tries)
		}
	}
}

// fail records a failed attempt: retrying with backoff, or dlq_pending when
// the failure is permanent or the retries are used up.
func (d *Dispatcher) fail(log *slog.Logger, op queue.Op, ev event, set *settings, err error) {
	now := time.Now()
	dec := set.policy.Decide(ev.Attempt, err, now)
	ev.Class, ev.ErrorMsg, ev.Failed = dec.Err.Name, dec.Err.Error(), now
	if dec.Retry {
		if serr := d.record(log, "recording a failed attempt", func(ctx context.Context) error {
			return d.store.Retry(ctx, op.ID, dec.Err.Name, dec.Err.Error(), dec.At)
		}); serr != nil {
			log.Error("recording a failed attempt failed", "error", serr, "attempt_error", err)
			return
		}
		log.Info("attempt failed; retrying", "error_class", dec.Err.Name, "error", dec.Err.Error(),
			"next_attempt_at", dec.At.UTC().Format(time.RFC3339Nano), "in", dec.At.Sub(now).Round(time.Millisecond))
		d.m.transition(queue.Retrying)
		ev.End, ev.Outcome, ev.NextAt = time.Now(), "retrying", dec.At
		d.emit(ev)
		return
	}
	if serr := d.record(log, "recording a failed attempt", func(ctx context.Context) error {
		return d.store.DeadLetterPending(ctx, op.ID, dec.Err.Name, dec.Err.Error())
	}); serr != nil {
		log.Error("recording a failed attempt failed", "error", serr, "attempt_error", err)
		return
	}
	why := "permanent failure"
	if dec.Exhausted {
		why = "retries used up"
	}
	log.Warn("op failed for good; dead-lettering it", "reason", why, "error_class", dec.Err.Name, "error", dec.Err.Error())
	d.m.transition(queue.DLQPending)
	d.m.attempts.Observe(float64(ev.Attempt))
	d.wakeDLQ()
	ev.End, ev.Outcome = time.Now(), "dlq_pending"
	d.emit(ev)
}

func (d *Dispatcher) emit(ev event) {
	if d.hook != nil {
		d.hook(ev)
	}
}

// lockInfo is what the background lock's node records: the op id and its
// info, within the engine's bound.
func lockInfo(op queue.Op) string {
	s := "op " + op.ID
	if op.Info != "" {
		s += ": " + op.Info
	}
	if len(s) <= lock.MaxInfoBytes {
		return s
	}
	n := lock.MaxInfoBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// newLeaseID is the Baton-Lease-Id of a delivery when no Deps.Hold names
// one: 128 random bits, known only to the app that gets the delivery.
func newLeaseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b[:])
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
