package queue

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// StateError reports a transition refused because of the op's state. It
// wraps ErrState, and ErrNotDeadLettered when Replay was refused.
type StateError struct {
	ID    string
	State State   // the op's current state
	Want  []State // states the transition accepts
}

func (e *StateError) Error() string {
	want := make([]string, len(e.Want))
	for i, w := range e.Want {
		want[i] = string(w)
	}
	return fmt.Sprintf("queue: op %q is %s, not %s", e.ID, e.State, strings.Join(want, " or "))
}

func (e *StateError) Unwrap() []error {
	if len(e.Want) == 1 && e.Want[0] == DeadLettered {
		return []error{ErrState, ErrNotDeadLettered}
	}
	return []error{ErrState}
}

// Submit accepts an op and returns it once it is fsynced, with created =
// true. A known id with the same body (id, object, info and payload; the
// payload compared as canonical JSON) returns the existing op, in whatever
// state, with created = false; a different body is ErrConflict. Invalid
// fields are a *FieldError; MaxOps unfinished ops, or a payload that would
// take the stored payload bytes past MaxBytes, is a *FullError (wrapping
// ErrQueueFull).
//
// If ctx ends while the commit is in progress the op may still be accepted;
// resubmitting the same id is safe.
func (s *Store) Submit(ctx context.Context, req SubmitRequest) (Op, bool, error) {
	hash, err := req.normalize()
	if err != nil {
		return Op{}, false, err
	}
	if err := s.enter(); err != nil {
		return Op{}, false, err
	}
	defer s.leave()
	unlock, err := s.lockID(ctx, req.ID)
	if err != nil {
		return Op{}, false, err
	}
	defer unlock()

	switch old, err := s.Get(req.ID); {
	case err == nil && old.BodyHash == hash:
		return old, false, nil
	case err == nil:
		return Op{}, false, fmt.Errorf("queue: op %q (%s, accepted %s): %w", req.ID, old.State,
			old.AcceptedAt.Format(time.RFC3339), ErrConflict)
	case !errors.Is(err, ErrNotFound):
		return Op{}, false, err
	}

	size := int64(len(req.Payload))
	e, q, err := s.reserve(req.ID, req.Object, size)
	if err != nil {
		return Op{}, false, err
	}
	op := Op{
		ID: req.ID, Object: req.Object, Info: req.Info, Seq: e.seq, AcceptedAt: e.acceptedAt,
		State: Queued, BodyHash: hash,
	}
	err = s.batch(func(tx *bolt.Tx) error {
		ops := tx.Bucket(bOps)
		if ops.Get([]byte(op.ID)) != nil {
			return fmt.Errorf("queue: op %q appeared during its own submit", op.ID)
		}
		if err := putOp(ops, op); err != nil {
			return err
		}
		if err := tx.Bucket(bPayloads).Put([]byte(op.ID), req.Payload); err != nil {
			return err
		}
		if err := addPayloadBytes(tx, size); err != nil {
			return err
		}
		if err := writeSeq(tx, op.Object, op.Seq); err != nil {
			return err
		}
		return tx.Bucket(bOpen).Put(objKey(op.Object, op.Seq), []byte(op.ID))
	})
	s.settle(e, q, err, size)
	if err != nil {
		return Op{}, false, fmt.Errorf("queue: submit %q: %w", op.ID, err)
	}
	op.Payload = req.Payload
	return op, true, nil
}

// FullError is a submit or replay refused because the queue is full. It
// wraps ErrQueueFull. Key is the property that bounds it: "queue.max.ops"
// (Used unfinished ops, Adding 1) or "queue.max.bytes" (Used payload bytes
// stored, Adding this op's payload bytes).
type FullError struct {
	Key    string
	Used   int64
	Adding int64
	Limit  int64
}

func (e *FullError) Error() string {
	if e.Key == "queue.max.bytes" {
		return fmt.Sprintf("queue: full: %d payload bytes stored, this op's %d would pass queue.max.bytes (%d)", e.Used, e.Adding, e.Limit)
	}
	return fmt.Sprintf("queue: full: %d unfinished ops, queue.max.ops is %d", e.Used, e.Limit)
}

func (e *FullError) Unwrap() error { return ErrQueueFull }

// reserve assigns the next seq of object to a pending entry that blocks the
// object's later ops until settle. It enforces MaxOps, and MaxBytes for
// size new payload bytes (0 for a replay: its payload is stored already).
func (s *Store) reserve(id, object string, size int64) (*entry, *objQueue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.sched.entries) + s.pending; n >= s.maxOps {
		return nil, nil, &FullError{Key: "queue.max.ops", Used: int64(n), Adding: 1, Limit: int64(s.maxOps)}
	}
	if used := s.bytes + s.pendBytes; size > 0 && used+size > s.maxBytes {
		return nil, nil, &FullError{Key: "queue.max.bytes", Used: used, Adding: size, Limit: s.maxBytes}
	}
	q, err := s.sched.queue(object, func() (seq uint64, err error) {
		err = s.view(func(tx *bolt.Tx) error { seq = readSeq(tx, object); return nil })
		return seq, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("queue: read seq of %q: %w", object, err)
	}
	q.lastSeq++
	e := &entry{id: id, object: object, seq: q.lastSeq, state: pendingState, acceptedAt: msTime(s.now())}
	q.fifo = append(q.fifo, e)
	s.pending++
	s.pendBytes += size
	return e, q, nil
}

// settle ends a reservation of size payload bytes: the entry becomes queued
// (and the bytes stored) if commitErr is nil, else it disappears (its seq
// stays unused).
func (s *Store) settle(e *entry, q *objQueue, commitErr error, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending--
	s.pendBytes -= size
	if commitErr != nil {
		s.sched.remove(e)
		s.changed.Notify()
		return
	}
	s.bytes += size
	e.state = Queued
	s.sched.entries[e.id] = e
	s.sched.reschedule(q)
	s.changed.Notify()
}

// Claim marks the next runnable op running (durably) and returns it with its
// payload; ErrNoneRunnable if none is runnable at now. Runnable: queued, or
// retrying with NextAttemptAt ≤ now, and no earlier op of its object
// queued, running or retrying. Runnable ops are taken on one timeline:
// queued ones at their AcceptedAt, retrying ones at their NextAttemptAt,
// earliest first (so neither kind starves the other). FirstAttemptAt is set
// to now on the first claim. Concurrent claims never return the same op.
func (s *Store) Claim(ctx context.Context, now time.Time) (Op, error) {
	if err := s.enter(); err != nil {
		return Op{}, err
	}
	defer s.leave()
	op, ok, _, _, err := s.tryClaim(now)
	if err == nil && !ok {
		err = ErrNoneRunnable
	}
	return op, err
}

// Next blocks until an op is runnable (see Claim), claims it and returns it.
// It wakes on submits, on transitions and at the earliest NextAttemptAt; it
// does not poll. It returns ctx's error when ctx ends and ErrClosed after
// Close.
func (s *Store) Next(ctx context.Context) (Op, error) { return s.NextWhen(ctx, nil, 0) }

// NextWhen is Next claiming only while ready reports true (e.g. "ZooKeeper
// is connected", so that no op is claimed that cannot be locked): while it
// reports false nothing is claimed, and it is asked again on every change
// and at least every poll. A nil ready is Next.
func (s *Store) NextWhen(ctx context.Context, ready func() bool, poll time.Duration) (Op, error) {
	if err := s.enter(); err != nil {
		return Op{}, err
	}
	defer s.leave()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var (
			op      Op
			ok      bool
			changed <-chan struct{}
			wait    time.Duration
			err     error
		)
		if ready == nil || ready() {
			op, ok, changed, wait, err = s.tryClaim(s.now())
			if err != nil || ok {
				return op, err
			}
		} else {
			s.mu.Lock()
			closed := s.closed
			changed = s.changed.Wait()
			s.mu.Unlock()
			if closed {
				return Op{}, ErrClosed
			}
			wait = max(poll, time.Millisecond)
		}
		var tick <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tick = timer.C
		}
		select {
		case <-changed:
		case <-tick:
		case <-ctx.Done():
			return Op{}, context.Cause(ctx)
		case <-s.done:
			return Op{}, ErrClosed
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// tryClaim claims a runnable op if there is one. Otherwise it returns the
// channel closed on the next change and how long until the earliest
// retrying op is due (0 if none).
func (s *Store) tryClaim(now time.Time) (op Op, ok bool, changed <-chan struct{}, wait time.Duration, err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Op{}, false, nil, 0, ErrClosed
	}
	var (
		e       *entry
		skipped []*objQueue
		release chan struct{}
	)
	for len(s.sched.ready) > 0 {
		q := s.sched.ready[0]
		if q.fifo[0].state == Retrying && q.keyAt.After(now) {
			wait = q.keyAt.Sub(now)
			break
		}
		heap.Pop(&s.sched.ready)
		h := q.fifo[0]
		if _, busy := s.busy[h.id]; busy {
			skipped = append(skipped, q)
			continue
		}
		e = h
		break
	}
	for _, q := range skipped {
		s.sched.reschedule(q)
	}
	if e == nil {
		changed = s.changed.Wait()
		s.mu.Unlock()
		return Op{}, false, changed, wait, nil
	}
	prev := e.state
	e.state = Running
	release = make(chan struct{})
	s.busy[e.id] = release
	s.mu.Unlock()

	err = s.batch(func(tx *bolt.Tx) error {
		var err error
		op, err = getOp(tx.Bucket(bOps), e.id)
		if err != nil {
			return err
		}
		if op.State != prev {
			return fmt.Errorf("queue: op %q is %s on disk, %s in memory", op.ID, op.State, prev)
		}
		op.State = Running
		op.NextAttemptAt = time.Time{}
		if op.FirstAttemptAt.IsZero() {
			op.FirstAttemptAt = msTime(now)
		}
		if err := putOp(tx.Bucket(bOps), op); err != nil {
			return err
		}
		op.Payload = append(json.RawMessage(nil), tx.Bucket(bPayloads).Get([]byte(op.ID))...)
		return nil
	})
	if err != nil {
		s.mu.Lock()
		e.state = prev
		s.sched.reschedule(s.sched.objects[e.object])
		s.mu.Unlock()
		s.unlockID(e.id, release)
		return Op{}, false, nil, 0, fmt.Errorf("queue: claim %q: %w", e.id, err)
	}
	s.unlockID(e.id, release)
	return op, true, nil, 0, nil
}

// Done records a successful delivery: running → done, with last_error and
// error_class cleared (the history keeps the failures). The payload is
// deleted (the body hash stays: resubmitting the same body is still
// recognised).
func (s *Store) Done(ctx context.Context, id string) error {
	return s.transition(ctx, id, Running, Done, func(op *Op, now time.Time) {
		op.FinishedAt = now
		op.LastError, op.ErrorClass = "", ""
		op.record(Event{At: now, Outcome: string(Done)})
	})
}

// Retry records a failed attempt to be retried at nextAt: running →
// retrying, attempts+1, with the error class and message (truncated to
// MaxErrorBytes).
func (s *Store) Retry(ctx context.Context, id, errClass, errMsg string, nextAt time.Time) error {
	return s.transition(ctx, id, Running, Retrying, func(op *Op, now time.Time) {
		op.Attempts++
		op.ErrorClass, op.LastError = errClass, truncate(errMsg, MaxErrorBytes)
		op.NextAttemptAt = msTime(nextAt)
		op.record(Event{At: now, Outcome: string(Retrying), ErrorClass: errClass, Error: errMsg})
	})
}

// DeadLetterPending records a failed attempt that ends the op's retries
// (exhausted or permanent): running → dlq_pending, attempts+1. The op no
// longer holds back its object's later ops.
func (s *Store) DeadLetterPending(ctx context.Context, id, errClass, errMsg string) error {
	return s.transition(ctx, id, Running, DLQPending, func(op *Op, now time.Time) {
		op.Attempts++
		op.ErrorClass, op.LastError = errClass, truncate(errMsg, MaxErrorBytes)
		op.record(Event{At: now, Outcome: string(DLQPending), ErrorClass: errClass, Error: errMsg})
	})
}

// DeadLettered records that the op was published to the dead-letter topic:
// dlq_pending → dead_lettered. A non-empty note says how the letter differs
// from the op (e.g. its payload was elided to fit the topic); it is kept as
// Op.LetterNote until a replay.
func (s *Store) DeadLettered(ctx context.Context, id, note string) error {
	return s.transition(ctx, id, DLQPending, DeadLettered, func(op *Op, now time.Time) {
		op.FinishedAt = now
		op.LetterNote = truncate(note, MaxErrorBytes)
	})
}

// DeadLetteredKept is DeadLettered for an op whose dead letter went out
// without its payload: the store then holds the only whole copy of the op,
// so it is marked Kept and never purged; only Replay or Discard ends it.
func (s *Store) DeadLetteredKept(ctx context.Context, id, note string) error {
	return s.transition(ctx, id, DLQPending, DeadLettered, func(op *Op, now time.Time) {
		op.FinishedAt = now
		op.LetterNote = truncate(note, MaxErrorBytes)
		op.Kept = true
	})
}

// Requeue gives a running op back without counting an attempt (ZooKeeper
// unavailable, shutdown): running → queued, runnable at once. Callers that
// cannot make progress (ZooKeeper down) should pause their workers rather
// than claim and requeue in a loop.
func (s *Store) Requeue(ctx context.Context, id string) error {
	return s.transition(ctx, id, Running, Queued, func(op *Op, now time.Time) {})
}

// transition moves an unfinished op from state from to state to, durably,
// then updates the scheduler. A done op's payload is deleted; a finished op
// goes into bFinished (for Purge), or bKept when mutate marked it Kept.
func (s *Store) transition(ctx context.Context, id string, from, to State, mutate func(op *Op, now time.Time)) error {
	done, err := s.enterID(ctx, id)
	if err != nil {
		return err
	}
	defer done()

	s.mu.Lock()
	e := s.sched.entries[id]
	var cur State
	if e != nil {
		cur = e.state
	}
	s.mu.Unlock()
	if e == nil {
		op, err := s.Get(id)
		if err != nil {
			return err
		}
		return &StateError{ID: id, State: op.State, Want: []State{from}}
	}
	if cur != from {
		return &StateError{ID: id, State: cur, Want: []State{from}}
	}

	now := msTime(s.now())
	var (
		op    Op
		freed int64 // payload bytes deleted
	)
	err = s.batch(func(tx *bolt.Tx) error {
		ops := tx.Bucket(bOps)
		freed = 0
		var err error
		op, err = getOp(ops, id)
		if err != nil {
			return err
		}
		if op.State != from {
			return fmt.Errorf("queue: op %q is %s on disk, %s in memory", id, op.State, from)
		}
		mutate(&op, now)
		op.State = to
		if to != Retrying {
			op.NextAttemptAt = time.Time{}
		}
		if err := putOp(ops, op); err != nil {
			return err
		}
		if to == Done {
			payloads := tx.Bucket(bPayloads)
			freed = int64(len(payloads.Get([]byte(id))))
			if err := payloads.Delete([]byte(id)); err != nil {
				return err
			}
			if err := addPayloadBytes(tx, -freed); err != nil {
				return err
			}
		}
		if to.Finished() {
			if err := tx.Bucket(bOpen).Delete(objKey(op.Object, op.Seq)); err != nil {
				return err
			}
			if op.Kept {
				return tx.Bucket(bKept).Put([]byte(id), nil)
			}
			return tx.Bucket(bFinished).Put(finKey(op.FinishedAt, id), []byte(to))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("queue: %s → %s %q: %w", from, to, id, err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.bytes -= freed
	if op.Kept && to == DeadLettered {
		s.kept++
	}
	wasBlocking := e.state.blocks()
	if from == DLQPending {
		s.sched.removeDLQ(e)
	}
	if to == DLQPending {
		s.sched.addDLQ(e)
	}
	e.state, e.readyAt = to, op.NextAttemptAt
	if to.Finished() {
		delete(s.sched.entries, id)
		s.finished[to]++
	}
	if q := s.sched.objects[e.object]; q != nil && wasBlocking {
		if !to.blocks() {
			s.sched.remove(e)
		} else {
			s.sched.reschedule(q)
		}
	}
	s.changed.Notify()
	return nil
}

// Replay queues a dead_lettered op again: it gets the next seq of its object
// (behind the object's newer ops), AcceptedAt = now, attempts 0, and its
// error and attempt times are cleared; its history keeps the earlier
// attempts and gains a "replayed" entry, and Replays counts it. Any other state is a *StateError
// wrapping ErrNotDeadLettered; an unknown id is ErrNotFound. Replay counts
// against MaxOps (ErrQueueFull).
func (s *Store) Replay(ctx context.Context, id string) (Op, error) {
	done, err := s.enterID(ctx, id)
	if err != nil {
		return Op{}, err
	}
	defer done()
	old, err := s.Get(id)
	if err != nil {
		return Op{}, err
	}
	if old.State != DeadLettered {
		return Op{}, &StateError{ID: id, State: old.State, Want: []State{DeadLettered}}
	}
	e, q, err := s.reserve(id, old.Object, 0)
	if err != nil {
		return Op{}, err
	}
	var (
		op      Op
		wasKept bool
	)
	err = s.batch(func(tx *bolt.Tx) error {
		ops := tx.Bucket(bOps)
		var err error
		if op, err = getDeadLettered(ops, id); err != nil {
			return err
		}
		wasKept = op.Kept
		if err := tx.Bucket(bFinished).Delete(finKey(op.FinishedAt, id)); err != nil {
			return err
		}
		if err := tx.Bucket(bKept).Delete([]byte(id)); err != nil {
			return err
		}
		op.Kept = false
		op.Seq, op.AcceptedAt, op.State, op.Attempts = e.seq, e.acceptedAt, Queued, 0
		op.LastError, op.ErrorClass, op.LetterNote = "", "", ""
		op.NextAttemptAt, op.FirstAttemptAt, op.FinishedAt = time.Time{}, time.Time{}, time.Time{}
		op.Replays++
		op.record(Event{At: e.acceptedAt, Outcome: Replayed})
		if err := putOp(ops, op); err != nil {
			return err
		}
		if err := writeSeq(tx, op.Object, op.Seq); err != nil {
			return err
		}
		if err := tx.Bucket(bOpen).Put(objKey(op.Object, op.Seq), []byte(id)); err != nil {
			return err
		}
		op.Payload = append(json.RawMessage(nil), tx.Bucket(bPayloads).Get([]byte(id))...)
		return nil
	})
	if err == nil {
		s.mu.Lock()
		s.forgetDeadLettered(wasKept, 0)
		s.mu.Unlock()
	}
	s.settle(e, q, err, 0)
	if err != nil {
		return Op{}, wrapDeadLetteredErr("replay", id, err)
	}
	return op, nil
}

// getDeadLettered reads op id from the ops bucket: a *StateError if it is
// not dead_lettered (the start of Replay and Discard).
func getDeadLettered(ops *bolt.Bucket, id string) (Op, error) {
	op, err := getOp(ops, id)
	if err != nil {
		return Op{}, err
	}
	if op.State != DeadLettered {
		return Op{}, &StateError{ID: id, State: op.State, Want: []State{DeadLettered}}
	}
	return op, nil
}

// forgetDeadLettered updates the counts for a dead_lettered op leaving its
// state (kept: it was kept; freed: payload bytes deleted). s.mu must be held.
func (s *Store) forgetDeadLettered(kept bool, freed int64) {
	s.finished[DeadLettered]--
	if kept {
		s.kept--
	}
	s.bytes -= freed
}

// wrapDeadLetteredErr returns err of action on a dead_lettered op: a state
// or not-found error as it is, any other prefixed with the action.
func wrapDeadLetteredErr(action, id string, err error) error {
	if errors.Is(err, ErrState) || errors.Is(err, ErrNotFound) {
		return err
	}
	return fmt.Errorf("queue: %s %q: %w", action, id, err)
}

// ListDLQPending returns up to limit dlq_pending ops (all if limit ≤ 0) with
// their payloads: whole leading runs of objects' dlq_pending ops, each
// object's in seq order (publish them in this order to keep each object's
// letters in order). Objects are taken in no particular order; the cost is
// O(ops returned + objects visited), not O(dlq_pending ops).
func (s *Store) ListDLQPending(ctx context.Context, limit int) ([]Op, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	s.mu.Lock()
	n := s.sched.ndlq
	if limit > 0 {
		n = min(n, limit)
	}
	ids := make([]string, 0, n)
	for _, es := range s.sched.dlq {
		for _, e := range es {
			if len(ids) >= n {
				break
			}
			ids = append(ids, e.id)
		}
		if len(ids) >= n {
			break
		}
	}
	s.mu.Unlock()
	out := make([]Op, 0, len(ids))
	err := s.view(func(tx *bolt.Tx) error {
		for _, id := range ids {
			if err := ctx.Err(); err != nil {
				return err
			}
			op, err := getOp(tx.Bucket(bOps), id)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if op.State != DLQPending {
				continue // published meanwhile
			}
			op.Payload = append(json.RawMessage(nil), tx.Bucket(bPayloads).Get([]byte(id))...)
			out = append(out, op)
		}
		return nil
	})
	return out, err
}

// Purge deletes finished ops (done, dead_lettered) that finished at least
// the retention before now, at most PurgeLimit per call, oldest first, and
// returns how many it deleted. Call it periodically; a result equal to the
// limit means more may be due. Per-object seq counters are kept.
//
// A dead_lettered op that is Kept (its dead letter went out without the
// payload) is never deleted: only Replay or Discard ends it. One written by
// an earlier version, which did not mark it, is recognised by its letter
// note and moved to the kept ops here (counted against the limit, not in the
// result).
func (s *Store) Purge(ctx context.Context, now time.Time) (int, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.leave()
	s.mu.Lock()
	retention, limit := s.retention, s.purgeLimit
	s.mu.Unlock()
	cutoff := now.Add(-retention).UnixMilli()
	purged := map[State]int{}
	var n, kept int
	var freed int64
	err := s.update(func(tx *bolt.Tx) error {
		clear(purged)
		n, kept, freed = 0, 0, 0
		var keys [][]byte
		var states []State
		c := tx.Bucket(bFinished).Cursor()
		for k, v := c.First(); k != nil && len(keys) < limit; k, v = c.Next() {
			if len(k) < 8 || int64(binary.BigEndian.Uint64(k[:8])) > cutoff {
				break
			}
			keys = append(keys, bytes.Clone(k))
			states = append(states, State(v))
		}
		ops, payloads, fin := tx.Bucket(bOps), tx.Bucket(bPayloads), tx.Bucket(bFinished)
		for i, k := range keys {
			id := k[8:]
			if err := fin.Delete(k); err != nil {
				return err
			}
			if states[i] == DeadLettered {
				op, err := getOp(ops, string(id))
				if err != nil && !errors.Is(err, ErrNotFound) {
					return err
				}
				if err == nil && (op.Kept || strings.HasPrefix(op.LetterNote, ElidedNotePrefix)) {
					op.Kept = true
					if err := putOp(ops, op); err != nil {
						return err
					}
					if err := tx.Bucket(bKept).Put(id, nil); err != nil {
						return err
					}
					kept++
					continue
				}
			}
			freed += int64(len(payloads.Get(id)))
			if err := ops.Delete(id); err != nil {
				return err
			}
			if err := payloads.Delete(id); err != nil {
				return err
			}
			purged[states[i]]++
			n++
		}
		return addPayloadBytes(tx, -freed)
	})
	if err != nil {
		return 0, fmt.Errorf("queue: purge: %w", err)
	}
	s.mu.Lock()
	for st, c := range purged {
		s.finished[st] -= c
	}
	s.kept += kept
	s.bytes -= freed
	s.mu.Unlock()
	if n > 0 {
		s.log.Debug("purged finished ops", "count", n)
	}
	if kept > 0 {
		s.log.Info("dead-lettered ops whose letter lacks the payload are kept until replayed or discarded", "count", kept)
	}
	return n, nil
}

// ElidedNotePrefix starts the letter note of an op whose dead letter went
// out without its payload (ops' dead-letter loop writes it); Purge uses it
// to recognise such ops recorded before Op.Kept existed.
const ElidedNotePrefix = "dead letter published without its payload"

// Discard deletes a dead_lettered op and its payload for good (an
// operator's decision: a kept op is otherwise never deleted) and returns
// it as it was, with its payload. Any other state is a *StateError
// wrapping ErrNotDeadLettered; an unknown id is ErrNotFound. The object's
// seq counter is kept; the id may be submitted again afterwards.
func (s *Store) Discard(ctx context.Context, id string) (Op, error) {
	done, err := s.enterID(ctx, id)
	if err != nil {
		return Op{}, err
	}
	defer done()
	var op Op
	err = s.update(func(tx *bolt.Tx) error {
		ops, payloads := tx.Bucket(bOps), tx.Bucket(bPayloads)
		var err error
		if op, err = getDeadLettered(ops, id); err != nil {
			return err
		}
		op.Payload = append(json.RawMessage(nil), payloads.Get([]byte(id))...)
		for _, del := range []struct {
			b *bolt.Bucket
			k []byte
		}{{ops, []byte(id)}, {payloads, []byte(id)}, {tx.Bucket(bFinished), finKey(op.FinishedAt, id)}, {tx.Bucket(bKept), []byte(id)}} {
			if err := del.b.Delete(del.k); err != nil {
				return err
			}
		}
		return addPayloadBytes(tx, -int64(len(op.Payload)))
	})
	if err != nil {
		return Op{}, wrapDeadLetteredErr("discard", id, err)
	}
	s.mu.Lock()
	s.forgetDeadLettered(op.Kept, int64(len(op.Payload)))
	s.mu.Unlock()
	return op, nil
}
