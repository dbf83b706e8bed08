// Package ops is Baton's background-operations dispatcher: it
// accepts ops over the sidecar's /v1/ops endpoints into the durable queue
// (package queue), delivers each to the app at sidecar.app.url under the
// object's background lock, retries failures with exponential backoff
// (package retry) and publishes the ops that fail for good to the
// dead-letter topic (package dlq).
//
// # Wiring (what `baton serve` does)
//
// The lock engine lives in the sidecar, so the sidecar is built first, then
// the dispatcher on its engine, which the sidecar then mounts (its /v1/ops
// endpoints, readiness, queue summary and drain: sidecar.Mount):
//
//	s, err := sidecar.New(cfg, sidecar.Options{Logger: log, Registry: reg})
//	d, err := ops.New(cfg, ops.Deps{Engine: s.Engine(), Registry: s.Registry(), Logger: log, Hold: s.HoldDelivery})
//	err = s.Mount(d)
//	go d.Run(ctx)       // returns after ctx ends (or Drain), once the workers stopped
//	err = s.Run(ctx)    // on shutdown calls Drain, then closes the engine
//	<-run finished; d.Close()
//	on SIGHUP: d.Reload(next.Config) next to s.Reload(next, changes)
//
// # Delivery
//
// A worker claims the next runnable op (per object in accept order: a later
// op waits while an earlier one is queued, running or retrying), takes the
// object's background lock (waiting zookeeper.background.task.timeout),
// POSTs {"id","object","info","payload","attempt","token","seq",
// "accepted_at"} with the Baton-* headers to the app, and releases the lock
// when the app answers, sidecar.app.timeout passes, or the grant ends (the
// delivery is then cancelled: a retryable LockLost failure, unless the grant
// ended because ZooKeeper became unavailable — session lost — which counts
// nothing, see below). The payload is
// sent byte for byte as accepted. Baton-Fencing-Token is the grant's token.
// Baton-Lease-Id is a lease id random per attempt (Deps.Hold names it),
// sent only in that header; while the delivery runs, an acquire of the same
// object with it as "lease_id" re-enters the lock. Baton-Token carries
// sidecar.app.token.file's content when it is set, for the app to check.
//
// Outcomes: 2xx → done. InstanceLockException, timeouts, connection errors,
// 408, 409, 423, 429, 5xx (and 1xx/3xx) → retrying at now +
// Policy.Delay(attempts), until the retries are used up → dlq_pending.
// Other 4xx → dlq_pending at once. ZooKeeper unavailable (no session, or the
// acquire failed with lock.ErrUnavailable / lock.ErrSessionLost, or the wait
// ran out while disconnected) → the op goes back to queued without counting
// the attempt (so does a delivery cut short because the session was lost
// meanwhile), and every worker pauses until the engine is connected again
// (checked every 100ms; each worker gives back at most the one op it
// claimed). Drain's deadline and Close also give back the ops whose
// delivery they cut short. An attempt cut short by a crash is not counted
// either (the queue requeues running ops at open).
//
// Recording an outcome (done, retrying, dlq_pending, queued again) is
// retried with backoff (50ms doubling to 2s) until it succeeds or the hard
// stop: a failing disk delays an op, it does not leave it running and its
// object blocked until a restart.
//
// Submissions are accepted (fsynced) as long as the queue is open, also
// while the sidecar drains at shutdown: they are delivered after the next
// start.
//
// # Dead letters
//
// One loop publishes dlq_pending ops (the op plus attempts, last_error,
// error_class, first_attempt_at, sidecar = sidecar.node.id; key = object)
// and then marks them dead_lettered. Each letter is sized against the
// topic's message limit (dlq.Publisher.Limit) and, when too large, sent
// without its payload (dlq.Fit; the op's letter_note says so); the op is
// then recorded as kept (queue.Store.DeadLetteredKept): the sidecar holds
// the only whole copy, so no purge deletes it, only a replay or a discard
// (POST /v1/ops/{id}/discard, audit-logged) ends it. A round
// sends up to 64 letters adding up to no more than the limit, whole runs of
// objects in seq order: kafka-go makes one record batch per partition,
// which the broker takes or refuses whole, so an object's letters reach the
// topic in order. A letter that cannot be sent in any form stays
// dlq_pending without holding back other objects. While Kafka is
// unreachable the ops stay dlq_pending on disk and the loop retries with a
// backoff from 100ms to 5s. A letter the broker acknowledged whose record
// failed is remembered and only its record is retried. A crash between the
// acknowledgement and the record publishes the letter again after the
// restart: delivery to the topic is at least once, and the op id identifies
// duplicates.
//
// # What is not guaranteed
//
// Deliveries are at least once: an app answer lost to a crash, a timeout
// or a lost lock is followed by another attempt. The fencing token orders
// grants, not ops: an app that must not let an older op overwrite newer
// data compares seq / accepted_at.
package ops
