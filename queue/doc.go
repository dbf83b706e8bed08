// Package queue is Baton's durable store of background operations ("ops"),
// kept in a bbolt file under queue.dir.
//
// Guarantees:
//
//   - An op is fsynced before [Store.Submit] returns. Concurrent submits share
//     one fsync (bbolt's DB.Batch group commit); nothing runs with NoSync.
//   - Each op gets a per-object accept sequence (Seq, from 1, never reused
//     for that object, even after its ops are purged).
//   - Runnable ops are claimed on one timeline: a queued op at its
//     AcceptedAt, a retrying one at its NextAttemptAt, earliest first.
//   - Per object, ops are claimed in Seq order: a later op waits while an
//     earlier one is queued, running or retrying (or being accepted);
//     dlq_pending and dead_lettered ops do not block. Ops of other objects
//     are not held up.
//   - Every state change is durable before the method returns. After a crash
//     [Open] puts running ops back to queued without counting the cut-short
//     attempt: attempts are only incremented when an attempt finishes with a
//     failure ([Store.Retry], [Store.DeadLetterPending]).
//   - One process per directory: Open takes an exclusive flock on dir/LOCK
//     and fails with [ErrLocked] if another sidecar (or another Store in this
//     process) holds it.
//   - The op id is the idempotency key: resubmitting the same body returns
//     the existing op (created=false), a different body is [ErrConflict].
//     Finished ops (done, dead_lettered) stay queryable and idempotent for
//     the retention, then [Store.Purge] deletes them. A done op's payload
//     is deleted at once (its body hash stays); a dead_lettered op keeps it
//     for replay.
//   - An op whose dead letter went out without its payload (too large for
//     the topic: [Store.DeadLetteredKept]) is the only whole copy left, so
//     it is kept (Op.Kept) past the retention until [Store.Replay] or
//     [Store.Discard]; nothing accepted disappears without someone asking.
//   - Bounds: Options.MaxOps unfinished ops and Options.MaxBytes stored
//     payload bytes (unfinished and dead_lettered ops); a submit past either
//     is a [*FullError] naming the property. The byte count is persisted in
//     the same transaction as the payloads it counts (recomputed once at
//     open for a store that lacks it).
//   - Disk: bbolt reuses freed pages but never shrinks its file; [Open]
//     and [Store.Compact] rewrite a file of 4 MiB or more that is at least
//     half free into a new one (bbolt's Compact, then rename). [Stats]
//     reports the size.
//
// Life of an op:
//
//	Submit ─▶ queued ─Claim/Next─▶ running ─Done─▶ done
//	            ▲  ▲                 │ │ └─DeadLetterPending─▶ dlq_pending ─DeadLettered─▶ dead_lettered
//	            │  └────Requeue──────┘ └─Retry─▶ retrying ─(NextAttemptAt)─Claim─▶ running      │
//	            └──────────────────────────────Replay────────────────────────────────────────────┘
//
// A replayed op gets a new Seq at the end of its object's sequence and a new
// AcceptedAt (the replay time): it is re-accepted, behind the object's newer
// ops; its attempts restart at 0.
//
// All methods are safe for concurrent use. Methods that write block until
// their transaction is fsynced; cancelling ctx stops waiting for another
// call on the same op, not a commit already in progress.
package queue
