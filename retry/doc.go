// Package retry decides what happens after a background op's delivery attempt
// fails: whether the failure is worth another attempt, and when that attempt
// may start.
//
// The two halves are independent:
//
//   - [Policy] is the exponential backoff schedule configured by the
//     retry.initial.interval, retry.max.interval, retry.multiplier,
//     retry.randomization and elastic.request.retry.count properties. It is
//     built on github.com/cenkalti/backoff/v4's ExponentialBackOff, with no
//     elapsed-time cap: only the retry count ends retries. Because attempt
//     counts are durable (they live in the queue, across restarts), the delay
//     before attempt n+1 is a pure function of n ([Policy.Delay]) rather than
//     hidden state in an in-memory BackOff.
//   - [Classify] maps a delivery outcome to an [*Error] with a [Class]
//     (retryable or permanent) and a stable Name used as the op's
//     error_class and the dead letter's baton-error-class header
//     (InstanceLockException, Timeout, ConnectionError, HTTP503, HTTP400, ...).
//
// The recipe a worker follows after a failed attempt:
//
//	attempts := op.Attempts + 1 // the attempt that just failed
//	d := policy.Decide(attempts, err, now)
//	if d.Retry {
//		store.Retry(ctx, op.ID, d.Err.Name, d.Err.Error(), d.At)
//	} else {
//		store.DeadLetterPending(ctx, op.ID, d.Err.Name, d.Err.Error())
//	}
//
// An attempt that never ran (ZooKeeper unavailable, shutdown) is not a failure
// and must not be classified: give the op back to the queue without counting.
package retry
