package lock

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// Recipes built on Acquire: every grant they return is an ordinary Grant of
// one object (validity, fencing token, holder watch, recovery), so they add
// no new way for two holders to overlap.

// MaxObjectsPerAcquire bounds AcquireAll's set.
const MaxObjectsPerAcquire = 64

// MaxPermits bounds a semaphore's permits.
const MaxPermits = 256

// SemaphorePrefix starts the object names a semaphore's gate and permits use
// under the lock root ("<prefix><name>/gate", "<prefix><name>/permit-<i>").
const SemaphorePrefix = ".semaphore/"

// CanonicalObjects validates a set of object names and returns it in the
// order every engine acquires it: by escaped node name. A name given twice
// is an error naming it.
func CanonicalObjects(objects []string) ([]string, error) {
	if len(objects) == 0 {
		return nil, fmt.Errorf("%w: the set of objects is empty", ErrInvalidObject)
	}
	if len(objects) > MaxObjectsPerAcquire {
		return nil, fmt.Errorf("%w: %d objects, at most %d", ErrInvalidObject, len(objects), MaxObjectsPerAcquire)
	}
	type named struct{ obj, node string }
	set := make([]named, 0, len(objects))
	seen := make(map[string]bool, len(objects))
	for _, o := range objects {
		n, err := EscapeObject(o)
		if err != nil {
			return nil, fmt.Errorf("object %q: %w", o, err)
		}
		if seen[n] {
			return nil, fmt.Errorf("%w: %q is given twice", ErrInvalidObject, o)
		}
		seen[n] = true
		set = append(set, named{o, n})
	}
	sort.Slice(set, func(i, j int) bool { return set[i].node < set[j].node })
	out := make([]string, len(set))
	for i, s := range set {
		out[i] = s.obj
	}
	return out, nil
}

// deadline returns when a recipe's wait ends: o.Wait, or the type's default,
// from start. A negative wait is an error.
func (e *Engine) deadline(start time.Time, typ Type, o AcquireOptions) (time.Time, error) {
	switch {
	case o.Wait < 0:
		return time.Time{}, fmt.Errorf("lock: wait %v is negative", o.Wait)
	case o.Wait > 0:
		return start.Add(o.Wait), nil
	case typ == Background:
		return start.Add(e.opts.BackgroundWait), nil
	}
	return start.Add(e.opts.ForegroundWait), nil
}

// step returns o for one acquire of a recipe: the wait left before deadline
// and a request id derived from o's (suffix), so that each node of the set
// carries its own id.
func step(o AcquireOptions, deadline time.Time, suffix string) AcquireOptions {
	o.Wait = max(time.Until(deadline), time.Nanosecond)
	if o.RequestID != "" {
		o.RequestID += "." + suffix
	}
	return o
}

// giveBackTimeout bounds a recipe's give-back, as fail bounds Acquire's
// clean-up: the wait bounds the call whatever ZooKeeper does.
const giveBackTimeout = 2 * time.Second

// giveBack releases grants a recipe took but will not report, within
// giveBackTimeout. A release that cannot be sent or answered in that time
// is completed by the session (Release's contract).
func giveBack(ctx context.Context, grants ...*Grant) {
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
	defer cancel()
	for _, g := range grants {
		if g != nil {
			_ = g.Release(bg)
		}
	}
}

// AcquireAll acquires every object of the set, all or nothing, within one
// wait (o.Wait or the type's default) counted from the call. Objects are
// taken one by one in CanonicalObjects order, so two requests for
// overlapping sets never wait for each other in a cycle; a request that
// runs out of time (or fails) gives back what it took and returns that
// error: an *InstanceLockError names the object it was waiting for (and
// the set's wait). A grant lost before the set is complete (a foreign
// deletion) sends the request back to the first object: the set is
// granted only when all are held. The grants come back in canonical order;
// each is an ordinary grant with its own token, and the caller must treat
// the loss of any as the loss of the set.
func (e *Engine) AcquireAll(ctx context.Context, objects []string, typ Type, o AcquireOptions) ([]*Grant, error) {
	order, err := CanonicalObjects(objects)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	deadline, err := e.deadline(start, typ, o)
	if err != nil {
		return nil, err
	}
	// Each grant counts its Waited from the call (or the caller's Since if
	// earlier), also in a later attempt: the set's wait is the first
	// grant's Waited plus the time to the last grant.
	if o.Since.IsZero() || o.Since.After(start) {
		o.Since = start
	}
	for attempt := 0; ; attempt++ {
		grants := make([]*Grant, 0, len(order))
		for i, obj := range order {
			suffix := strconv.Itoa(i)
			if attempt > 0 { // each node of the set carries its own id
				suffix += "." + strconv.Itoa(attempt)
			}
			g, err := e.Acquire(ctx, obj, typ, step(o, deadline, suffix))
			if err != nil {
				var ile *InstanceLockError
				if errors.As(err, &ile) { // the set's wait, not this object's
					c := *ile
					c.Waited = time.Since(o.Since)
					err = &c
				}
				giveBack(ctx, grants...)
				return nil, err
			}
			grants = append(grants, g)
		}
		// Granted only when all are held: a grant lost while we waited
		// for a later object (a foreign deletion, a forced revoke) means
		// the set was never held. Give it back and take the set again, in
		// canonical order, within the wait.
		lost := false
		for _, g := range grants {
			lost = lost || g.Err() != nil
		}
		if !lost {
			return grants, nil
		}
		e.log.Warn("a grant of the set was lost before the set was complete; taking the set again", "objects", order)
		giveBack(ctx, grants...)
	}
}

// SemaphoreObjects returns the object names of a semaphore's gate and of its
// first permits permits.
func SemaphoreObjects(name string, permits int) (gate string, slots []string, err error) {
	if name == "" || strings.ContainsRune(name, '/') {
		return "", nil, fmt.Errorf("%w: semaphore name %q must be non-empty and without '/'", ErrInvalidObject, name)
	}
	if permits < 1 || permits > MaxPermits {
		return "", nil, fmt.Errorf("lock: permits %d is not between 1 and %d", permits, MaxPermits)
	}
	base := SemaphorePrefix + name + "/"
	gate = base + "gate"
	for i := range permits {
		slots = append(slots, base+"permit-"+strconv.Itoa(i))
	}
	if err := ValidateObject(slots[len(slots)-1]); err != nil {
		return "", nil, fmt.Errorf("semaphore %q: %w", name, err)
	}
	return gate, slots, nil
}

// PermitIndex returns i for the object of a semaphore's permit i, and
// whether obj is one.
func PermitIndex(obj string) (int, bool) {
	rest, ok := strings.CutPrefix(obj, SemaphorePrefix)
	if !ok {
		return 0, false
	}
	name, num, ok := strings.Cut(rest, "/permit-")
	if !ok || name == "" || strings.ContainsRune(name, '/') {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || n >= MaxPermits || strconv.Itoa(n) != num {
		return 0, false
	}
	return n, true
}

// AcquirePermit takes one of a counting semaphore's permits: at most permits
// holders at once among requests that agree on permits (a request asking
// for fewer uses only the lower permits). Permit i is an ordinary lock
// object (SemaphoreObjects), so the returned grant is the grant of that
// object: its token fences writes made under that permit, and a lost
// holder's permit comes back only when its privateLock is gone, after the
// validity its holder was told. Requests queue on the semaphore's gate, a
// lock like any other, and only the gate's holder waits on the permits: it
// takes a permit it saw free, or else waits on all of them at once and
// keeps the first granted. Foreground requests go before background ones:
// a background holder of the gate that sees a foreground request queue at
// the gate stops waiting on the permits and queues at the gate again.
// The wait (o.Wait or the type's default) covers both; a request that runs
// out of time returns an *InstanceLockError naming the semaphore and leaves
// no node behind.
func (e *Engine) AcquirePermit(ctx context.Context, name string, permits int, typ Type, o AcquireOptions) (*Grant, error) {
	gateObj, slots, err := SemaphoreObjects(name, permits)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	deadline, err := e.deadline(start, typ, o)
	if err != nil {
		return nil, err
	}
	// The permit's grant counts the whole call in Waited (the wait at the
	// gate too), or the caller's Since if earlier: a client places the
	// validity from it.
	if o.Since.IsZero() || o.Since.After(start) {
		o.Since = start
	}
	named := func(err error) error {
		var ile *InstanceLockError
		if errors.As(err, &ile) {
			c := *ile
			c.Object, c.Waited = SemaphorePrefix+name, time.Since(o.Since)
			return &c
		}
		return err
	}
	for attempt := 0; ; attempt++ {
		gate, err := e.Acquire(ctx, gateObj, typ, step(o, deadline, attemptSuffix("gate", attempt)))
		if err != nil {
			err = named(err)
			var ile *InstanceLockError
			if errors.As(err, &ile) {
				// The gate's holder is a waiter ahead of us, not a holder
				// of the semaphore: name a permit's holder instead.
				if ile.Holder != nil && ile.Position > 0 {
					ile.Position++
				}
				ile.Holder = e.permitHolder(ctx, slots)
			}
			return nil, err
		}
		g, err, yielded := e.underGate(ctx, gate, slots, typ, o, deadline, attempt)
		giveBack(ctx, gate)
		if g == nil && yielded {
			// A request that sorts ahead of ours (foreground, while we are
			// background) waits at the gate: it goes first, as at any
			// lock; we queue at the gate again.
			continue
		}
		return g, named(err)
	}
}

func attemptSuffix(s string, attempt int) string {
	if attempt == 0 {
		return s
	}
	return s + "." + strconv.Itoa(attempt)
}

// underGate takes a permit for the gate's holder: one it saw free, or else
// the first granted of a wait on all of them. A background holder also
// watches the gate: when a request that sorts ahead of its own gate node
// (a foreground one) queues there, it stops waiting on the permits and
// reports yielded, so that the gate goes to that request first.
func (e *Engine) underGate(ctx context.Context, gate *Grant, slots []string, typ Type, o AcquireOptions, deadline time.Time, attempt int) (*Grant, error, bool) {
	fctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if i := e.freePermit(fctx, slots); i >= 0 {
		to := step(o, deadline, attemptSuffix(strconv.Itoa(i), attempt))
		to.TryOnce = true
		if g, err := e.Acquire(ctx, slots[i], typ, to); err == nil {
			return g, nil, false
		}
	}
	var yielded atomic.Bool
	var wg sync.WaitGroup
	if typ == Background {
		wg.Go(func() {
			if e.aheadAtGate(fctx, gate) {
				yielded.Store(true)
				cancel()
			}
		})
	}
	g, err := e.firstPermit(fctx, slots, typ, o, deadline, attempt)
	cancel()
	wg.Wait()
	return g, err, yielded.Load()
}

// aheadAtGate watches the gate's queue until a request sorts ahead of the
// gate's holder (true) or ctx ends or the gate cannot be watched (false).
// The watch left behind fires when the holder gives the gate back.
func (e *Engine) aheadAtGate(ctx context.Context, gate *Grant) bool {
	for {
		type listing struct {
			kids  []string
			czxid int64
			ev    <-chan zk.Event
		}
		l, err := zcall(ctx, func() (listing, error) {
			kids, st, ev, err := gate.s.conn.ChildrenW(gate.objPath)
			if err != nil {
				return listing{}, err
			}
			return listing{kids, st.Czxid, ev}, nil
		}, nil)
		if err != nil || gate.Err() != nil {
			return false
		}
		// The grant order with aging: a foreground request that arrived
		// after our (background) gate node aged goes after us.
		queue, _ := sortedQueue(l.kids)
		if queue, err = e.ordered(gate.s, gate.name, gate.objPath, l.czxid, queue); err != nil {
			return false
		}
		if len(queue) > 0 && queue[0] != gate.node {
			return true
		}
		select {
		case <-l.ev:
		case <-gate.Done():
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// freePermit returns a permit with neither holder nor waiters, or -1.
func (e *Engine) freePermit(ctx context.Context, slots []string) int {
	free := make([]bool, len(slots))
	var wg sync.WaitGroup
	for i, obj := range slots {
		wg.Go(func() {
			st, err := e.Inspect(ctx, obj)
			free[i] = err == nil && st.Holder == nil && len(st.Waiters) == 0
		})
	}
	wg.Wait()
	for i, f := range free {
		if f {
			return i
		}
	}
	return -1
}

// permitHolder returns the holder of the lowest permit held, or nil, within
// giveBackTimeout (it names a holder in an error).
func (e *Engine) permitHolder(ctx context.Context, slots []string) *Node {
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
	defer cancel()
	holders := make([]*Node, len(slots))
	var wg sync.WaitGroup
	for i, obj := range slots {
		wg.Go(func() {
			if st, err := e.Inspect(bg, obj); err == nil {
				holders[i] = st.Holder
			}
		})
	}
	wg.Wait()
	for _, h := range holders {
		if h != nil {
			return h
		}
	}
	return nil
}

// firstPermit waits on every permit at once and keeps the first granted;
// the others' waits are cancelled and any grant that raced the cancel is
// given back.
func (e *Engine) firstPermit(ctx context.Context, slots []string, typ Type, o AcquireOptions, deadline time.Time, attempt int) (*Grant, error) {
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	type result struct {
		g   *Grant
		err error
	}
	results := make(chan result, len(slots))
	for i, obj := range slots {
		go func() {
			g, err := e.Acquire(wctx, obj, typ, step(o, deadline, attemptSuffix(strconv.Itoa(i), attempt)))
			results <- result{g, err}
		}()
	}
	var won *Grant
	var firstErr error
	for range slots {
		r := <-results
		switch {
		case r.err == nil && won == nil:
			won = r.g
			cancel()
		case r.err == nil:
			giveBack(ctx, r.g)
		case firstErr == nil || isInstanceLock(firstErr) && !isInstanceLock(r.err):
			firstErr = r.err // prefer a cause that is not the cancelled waits'
		}
	}
	if won != nil {
		return won, nil
	}
	return nil, firstErr
}

func isInstanceLock(err error) bool {
	var ile *InstanceLockError
	return errors.As(err, &ile)
}
