package lock_test

// Review (vreview) of commit 687702a: AcquireOptions.Since. Set and before
// the call, Grant.Waited and InstanceLockError.Waited count from it; the
// Wait bound still counts from the call. Zero, or a time after the call,
// changes nothing.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
)

// TestReviewVSince: on both protocols, a grant's Waited with Since zero or
// an hour ahead lies within the call (0 <= Waited <= the call's wall
// time); with Since 1 s before the call it is at least 1 s and at most the
// call's wall time + 1 s. An acquire behind another engine's holder with
// Wait 300 ms answers an InstanceLockError no earlier than 300 ms after
// the call whatever Since says (10 s before: not at once; an hour ahead:
// not an hour later), its Waited counted from Since only when Since is
// before the call.
func TestReviewVSince(t *testing.T) {
	for _, proto := range []lock.Protocol{lock.Plugin, lock.Native} {
		t.Run(proto.String(), func(t *testing.T) {
			z := zkServer
			root := testRoot(t, z)
			set := func(o *lock.Options) { o.Protocol = proto }
			e, other := newEngine(t, z.Servers(), root, set), newEngine(t, z.Servers(), root, set)

			for _, c := range []struct {
				name  string
				since func(call time.Time) time.Time
				extra time.Duration // how much before the call Since is
			}{
				{"zero", func(time.Time) time.Time { return time.Time{} }, 0},
				{"future", func(call time.Time) time.Time { return call.Add(time.Hour) }, 0},
				{"past", func(call time.Time) time.Time { return call.Add(-time.Second) }, time.Second},
			} {
				call := time.Now()
				g, err := e.Acquire(context.Background(), "since", lock.Foreground, lock.AcquireOptions{Wait: 10 * time.Second, Since: c.since(call)})
				wall := time.Since(call)
				if err != nil {
					t.Fatalf("%s: Acquire: %v", c.name, err)
				}
				if w := g.Waited(); w < c.extra || w > wall+c.extra {
					t.Errorf("Since %s: Waited %v, want within [%v, %v] (the call took %v)", c.name, w, c.extra, wall+c.extra, wall)
				}
				release(t, g)
			}

			h := acquire(t, other, "since", lock.Foreground, lock.AcquireOptions{})
			defer release(t, h)
			const wait = 300 * time.Millisecond
			for _, c := range []struct {
				name  string
				since func(call time.Time) time.Time
				extra time.Duration
			}{
				{"zero", func(time.Time) time.Time { return time.Time{} }, 0},
				{"future", func(call time.Time) time.Time { return call.Add(time.Hour) }, 0},
				{"past", func(call time.Time) time.Time { return call.Add(-10 * time.Second) }, 10 * time.Second},
			} {
				call := time.Now()
				g, err := e.Acquire(context.Background(), "since", lock.Foreground, lock.AcquireOptions{Wait: wait, Since: c.since(call)})
				wall := time.Since(call)
				if err == nil {
					release(t, g)
					t.Fatalf("Since %s: granted while another engine holds the object", c.name)
				}
				ile, ok := errors.AsType[*lock.InstanceLockError](err)
				if !ok {
					t.Fatalf("Since %s: %v, want an InstanceLockError", c.name, err)
				}
				// A timer never fires early: the wait counts from the call.
				// The upper bound is slack for a slow machine (an hour if
				// the wait counted from a future Since).
				if wall < wait || wall > wait+10*time.Second {
					t.Errorf("Since %s: answered after %v, want the wait of %v counted from the call", c.name, wall, wait)
				}
				if ile.Waited < wait+c.extra || ile.Waited > wall+c.extra {
					t.Errorf("Since %s: InstanceLockError.Waited %v, want within [%v, %v]", c.name, ile.Waited, wait+c.extra, wall+c.extra)
				}
			}
		})
	}
}

// TestReviewVPermitWaitedCountsGate: a permit's grant counts the whole
// AcquirePermit call in Waited, its wait at the semaphore's gate
// included: the sidecar hands it out as the lease's waited_ms, from which
// a client places the validity (too small wastes it: a wait at the gate
// longer than the validity would leave the client a lease it takes as
// already expired). One permit, held by p; q (same engine) holds the gate
// waiting for the permit; r (another engine) waits at the gate behind q
// at least 300 ms, then on the permit behind q 300 ms more. r's Waited is
// at least the time it was surely waiting and at most its call's wall
// time. On both protocols.
func TestReviewVPermitWaitedCountsGate(t *testing.T) {
	for _, proto := range []lock.Protocol{lock.Plugin, lock.Native} {
		t.Run(proto.String(), func(t *testing.T) {
			z := zkServer
			root := testRoot(t, z)
			set := func(o *lock.Options) { o.Protocol = proto }
			e, other := newEngine(t, z.Servers(), root, set), newEngine(t, z.Servers(), root, set)
			ctx := context.Background()
			gate, _, err := lock.SemaphoreObjects("vs", 1)
			if err != nil {
				t.Fatal(err)
			}
			type got struct {
				g          *lock.Grant
				err        error
				call, recv time.Time
			}
			permit := func(en *lock.Engine) <-chan got {
				ch := make(chan got, 1)
				go func() {
					call := time.Now()
					g, err := en.AcquirePermit(ctx, "vs", 1, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
					ch <- got{g, err, call, time.Now()}
				}()
				return ch
			}
			p, err := e.AcquirePermit(ctx, "vs", 1, lock.Foreground, lock.AcquireOptions{Wait: 10 * time.Second})
			if err != nil {
				t.Fatalf("first permit: %v", err)
			}
			qc := permit(e)
			waitFor(t, 10*time.Second, "q holds the gate", func() bool {
				st, err := e.Inspect(ctx, gate)
				return err == nil && st.Holder != nil
			})
			rc := permit(other)
			waitFor(t, 10*time.Second, "r waits at the gate", func() bool {
				st, err := e.Inspect(ctx, gate)
				return err == nil && len(st.Waiters) > 0
			})
			seen := time.Now()
			time.Sleep(300 * time.Millisecond)
			release(t, p)
			q := <-qc
			if q.err != nil {
				t.Fatalf("q: %v", q.err)
			}
			time.Sleep(300 * time.Millisecond)
			surely := time.Since(seen)
			release(t, q.g)
			r := <-rc
			if r.err != nil {
				t.Fatalf("r: %v", r.err)
			}
			defer release(t, r.g)
			if w, wall := r.g.Waited(), r.recv.Sub(r.call); w < surely || w > wall {
				t.Errorf("the permit's Waited %v, want within [%v, %v]: at least the time it surely waited (gate and permit), at most the call", w, surely, wall)
			}
		})
	}
}

// TestReviewVSetWaitedCountsRetry: a set taken again after one of its
// grants was lost while it waited for a later object (x's privateLock
// deleted by an operator while the set waits for y; then x is held by
// another for 200 ms) counts the whole AcquireAll call in its wait, as the
// sidecar reports it (the first member's Waited + the time to the last
// member's grant): at least the time it was surely waiting, at most the
// call's wall time — not only the last attempt.
func TestReviewVSetWaitedCountsRetry(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root)
	other := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())
	hy := acquire(t, other, "y", lock.Foreground, lock.AcquireOptions{})
	type result struct {
		gs         []*lock.Grant
		err        error
		call, recv time.Time
	}
	done := make(chan result, 1)
	go func() {
		call := time.Now()
		gs, err := e.AcquireAll(context.Background(), []string{"x", "y"}, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
		done <- result{gs, err, call, time.Now()}
	}()
	waitFor(t, 20*time.Second, "x held by the set, y waited for", func() bool {
		sx, err1 := other.Inspect(context.Background(), "x")
		sy, err2 := other.Inspect(context.Background(), "y")
		return err1 == nil && err2 == nil && sx.Holder != nil && len(sy.Waiters) == 1
	})
	seen := time.Now()
	time.Sleep(500 * time.Millisecond) // x's holder watch is armed (HolderWatchDelay 25 ms)
	if err := conn.Delete(root+"/x/privateLock", -1); err != nil {
		t.Fatalf("delete x's privateLock: %v", err)
	}
	hx := acquire(t, other, "x", lock.Foreground, lock.AcquireOptions{})
	release(t, hy)
	time.Sleep(200 * time.Millisecond)
	surely := time.Since(seen)
	release(t, hx)
	r := <-done
	if r.err != nil {
		t.Fatalf("AcquireAll = %v, want the set granted once x and y are free", r.err)
	}
	defer func() {
		for _, g := range r.gs {
			_ = g.Release(context.Background())
		}
	}()
	first, last := r.gs[0], r.gs[len(r.gs)-1]
	if w, wall := first.Waited()+last.AcquiredAt().Sub(first.AcquiredAt()), r.recv.Sub(r.call); w < surely || w > wall {
		t.Errorf("the set's wait %v, want within [%v, %v]: at least the time it surely waited, at most the call", w, surely, wall)
	}
}
