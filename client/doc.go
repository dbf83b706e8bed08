// Package client is the Go client of the Baton sidecar's HTTP API over its
// unix socket (api/openapi.json).
//
//	c := client.New("/run/baton/baton.sock")
//	defer c.Close()
//	err := c.Lock(ctx, "article-42", func(ctx context.Context) error {
//		// ctx is cancelled if the lock is lost, and a grace before its
//		// validity ends if that is no longer extended; pass the lease's
//		// token (LeaseFrom(ctx).Token()) to the storage as the fencing token.
//		return write(ctx)
//	}, client.WithWait(5*time.Second))
//
// Stop by: a holder must stop before the lock's validity ends, not at the
// instant it ends, to leave a write in flight the time to finish while the
// lock is still valid. [Lease.StopBy] is that signal, with a grace: while
// the validity is no longer extended (ZooKeeper unreachable, the sidecar
// draining or not answering) it says stop a grace before the validity ends;
// on a loss, a revocation or a preemption it says stop at once. [Client.Lock]
// cancels its fn's context on it ([WithStopGrace], default
// [DefaultStopGrace]); `baton lock` sends SIGTERM on it, and SIGKILL by its
// deadline.
//
// Acquire returns a [Lease] that renews itself in the background (at a third
// of the lease, and often enough to keep [Lease.ValidFor] fresh) and
// long-polls the sidecar, so [Lease.Lost] is closed as soon as the sidecar
// reports the lock lost, a renewal is refused, or the last validity the
// sidecar confirmed runs out without a new confirmation. Validity is what a
// holder must respect: before a critical write, check [Lease.ValidFor] and
// hand [Lease.Token] to the storage, which must reject writes with a token
// lower than one it has seen.
//
// Errors: [*InstanceLockError] (errors.As) when the lock was not granted in
// time; [ErrLockLost], [ErrNoNode] and [ErrUnavailable] (errors.Is) for a
// lost lease, an unknown or released lease, and an unreachable sidecar or
// ZooKeeper; every other answer is an [*APIError] with the status and kind.
//
// Recipes: [Client.AcquireAll] takes a set of objects all or nothing as one
// lease ([Lease.Objects]: fence each object's writes with its own token; the
// loss of any object is the loss of the lease); [Client.AcquirePermit] takes
// one of a counting semaphore's permits ([Lease.Permit]), and
// [Client.Semaphore] shows its holders and waiters.
//
// Acquire sends "bind":"process": the sidecar releases a lease when the
// process that acquired it exits, so a lease lives no longer than the
// process that holds this Client. Lease.State tells whether the sidecar
// reports the lock held, suspect (ZooKeeper unreachable: finish by
// ValidUntil) or draining (the sidecar shuts down: finish by DrainUntil).
package client
