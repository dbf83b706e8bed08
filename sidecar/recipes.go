package sidecar

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
)

// The recipes on the lock engine's (lock/recipes.go), through the socket:
//
//   - POST /v1/locks/acquire {"objects":[…], …}: a set of objects, all or
//     nothing, within one wait (lock.Engine.AcquireAll: canonical order,
//     what was taken is given back on failure). The lease holds the set
//     (grantSet): one lease id, one release, each object with its own
//     token (Lease.Objects); the loss of any object (revoked, its node
//     deleted, the session) is the loss of the set, and its other objects
//     are freed after the validity told. Not re-entrant, not preemptible.
//   - POST /v1/semaphores/{name}/acquire {"permits":N, …}: one of N
//     permits (lock.Engine.AcquirePermit). Permit i is an ordinary lock
//     object, so the lease is an ordinary lease of that object, with its
//     token, validity and revocation (Lease.Semaphore, Lease.Permit).
//   - GET /v1/semaphores/{name}: the held permits and the waiters.

// acquireKind is which acquire route a request came by.
type acquireKind int

const (
	acquireObject acquireKind = iota // POST /v1/locks/{object}/acquire
	acquireSet                       // POST /v1/locks/acquire
	acquirePermit                    // POST /v1/semaphores/{name}/acquire
)

// validLockObject checks the object of a lock acquire: a valid name, and
// not a semaphore's (taken only through its semaphore, which keeps the
// count).
func validLockObject(obj string) error {
	if err := validObject(obj); err != nil {
		return err
	}
	if strings.HasPrefix(obj, lock.SemaphorePrefix) {
		return badRequest("object", "%q is under %q, reserved for semaphores: use POST /v1/semaphores/{name}/acquire", obj, lock.SemaphorePrefix)
	}
	return nil
}

// parseRecipe is parseAcquire's part for objects and permits: each only on
// its own route (and required there), and neither with lease_id or the
// preemption fields.
func (sp *acquireSpec) parseRecipe(kind acquireKind, req api.AcquireRequest) error {
	if kind != acquireSet && req.Objects != nil {
		return badRequest("objects", "only on POST /v1/locks/acquire (no object in the path): a set of objects, all or nothing")
	}
	if kind != acquirePermit && req.Permits != 0 {
		return badRequest("permits", "only on POST /v1/semaphores/{name}/acquire")
	}
	what := ""
	switch kind {
	case acquireObject:
		return nil
	case acquireSet:
		what = "a set of objects"
		if len(req.Objects) == 0 {
			return badRequest("objects", "required: the objects to acquire all or nothing, 1 to %d names", lock.MaxObjectsPerAcquire)
		}
		objs, err := lock.CanonicalObjects(req.Objects)
		if err != nil {
			return badRequest("objects", "%v", err)
		}
		for _, o := range objs {
			if strings.HasPrefix(o, lock.SemaphorePrefix) {
				return badRequest("objects", "%q is under %q, reserved for semaphores", o, lock.SemaphorePrefix)
			}
		}
		sp.objects, sp.object = objs, objs[0]
	case acquirePermit:
		what = "a semaphore"
		if req.Permits < 1 || req.Permits > lock.MaxPermits {
			return badRequest("permits", "%d: required, the semaphore's number of permits, 1 to %d (every request for the semaphore gives the same)",
				req.Permits, lock.MaxPermits)
		}
		if _, _, err := lock.SemaphoreObjects(sp.object, req.Permits); err != nil {
			return badRequest("name", "%v", err)
		}
		sp.permits = req.Permits
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"lease_id", req.LeaseID != ""}, {"preemptible", req.Preemptible}, {"cleanup_ms", req.CleanupMS != nil},
		{"preempt", req.Preempt}, {"preempt_wait_ms", req.PreemptWaitMS != nil}, {"forceful", req.Forceful},
	} {
		if f.set {
			return badRequest(f.name, "not supported for %s (leave it out)", what)
		}
	}
	return nil
}

// take asks the engine for what the acquisition's spec names: a set, a
// semaphore's permit or one object.
func (a *acquisition) take(ctx context.Context, opts lock.AcquireOptions) (holding, error) {
	e, sp := a.s.eng, &a.sp
	switch {
	case sp.objects != nil:
		gs, err := e.AcquireAll(ctx, sp.objects, sp.typ, opts)
		if err != nil {
			return nil, err
		}
		return newGrantSet(gs), nil
	case sp.permits > 0:
		g, err := e.AcquirePermit(ctx, sp.object, sp.permits, sp.typ, opts)
		if err != nil {
			return nil, err
		}
		return g, nil
	}
	if ch := a.s.leases.freeingOf(sp.object); ch != nil && !opts.TryOnce {
		var (
			before time.Duration
			over   error
		)
		opts.Since = time.Now() // the lease's waited_ms, and a 423's, count this wait too
		if opts, before, over = afterFreeing(ctx, ch, opts); over != nil {
			// The wait ran out (or the request ended) with the release
			// still in flight or just landed: no engine call, whose try
			// once would wait for a connection up to the engine's default
			// wait, past wait_ms.
			return nil, &lock.InstanceLockError{Object: sp.object, Type: sp.typ, Waited: before, Err: over}
		}
	}
	g, err := e.Acquire(ctx, sp.object, sp.typ, opts)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// afterFreeing waits, within the acquire's wait, until the no-wait
// release of the object in flight on this sidecar has landed (done), and
// returns the options with what is left of the wait and the time it
// waited; over is the cause (context.DeadlineExceeded, or ctx's error)
// when nothing is left. The engine would grant the acquire after that
// release anyway; it would first queue a node behind it.
func afterFreeing(ctx context.Context, done <-chan struct{}, opts lock.AcquireOptions) (_ lock.AcquireOptions, waited time.Duration, over error) {
	t0 := time.Now()
	timer := time.NewTimer(opts.Wait)
	defer timer.Stop()
	select {
	case <-done:
	case <-ctx.Done():
	case <-timer.C:
	}
	waited = time.Since(t0)
	if err := ctx.Err(); err != nil {
		return opts, waited, err
	}
	left := opts.Wait - waited
	if left <= 0 {
		return opts, waited, context.DeadlineExceeded
	}
	opts.Wait = left
	return opts, waited, nil
}

// semaphore is GET /v1/semaphores/{name}: the held permits (the objects
// "<prefix><name>/permit-<i>" with a holder) and the waiters (the gate's
// holder, which waits on the permits, then the gate's waiters). Counted
// against sidecar.max.lists.per.uid while it reads.
func (v *views) semaphore(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	gate, _, err := lock.SemaphoreObjects(name, 1)
	if err != nil {
		return badRequest("name", "%v", err)
	}
	if _, err := queryParams(r); err != nil {
		return err
	}
	p := peerFrom(r.Context()) // it reads the root's children, as GET /v1/locks does
	if err := v.caps.takeFor(p, capLists); err != nil {
		return err
	}
	defer v.caps.put(p.uid, capLists)
	ctx, cancel := context.WithTimeout(r.Context(), inspectTimeout)
	defer cancel()
	out := api.SemaphoreStatus{Name: name, Holders: []api.SemaphoreHolder{}, Waiters: []api.Waiter{}}
	after := ""
	for {
		sums, next, err := v.eng.List(ctx, lock.SemaphorePrefix+name+"/permit-", after, 1000)
		if err != nil {
			return err
		}
		for _, sm := range sums {
			i, ok := lock.PermitIndex(sm.Object)
			if !ok || sm.Holder == nil {
				continue
			}
			out.Holders = append(out.Holders, api.SemaphoreHolder{Permit: i, Object: sm.Object, Holder: holderOf(sm.Holder)})
		}
		if next == "" {
			break
		}
		after = next
	}
	slices.SortFunc(out.Holders, func(a, b api.SemaphoreHolder) int { return a.Permit - b.Permit })
	st, err := v.eng.Inspect(ctx, gate)
	if err != nil {
		return err
	}
	if h := st.Holder; h != nil {
		out.Waiters = append(out.Waiters, waiterOf(*h))
	}
	for _, n := range st.Waiters {
		out.Waiters = append(out.Waiters, waiterOf(n))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
