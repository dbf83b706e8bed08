package lock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
)

// parking turns parking on (newEngine turns it off, see there).
func parking(o *lock.Options) { o.DisableParking = false }

// W2 on one engine: eight callers take one object by turns. Behind a
// holder of the engine they park, and each release's multi grants the next
// one (creating its child): one write per acquisition, nothing else on
// the engine's session. No overlap, rising tokens, nothing left.
func TestParkTurnsOneWrite(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, native, parking, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
	var chk overlapChecker
	const callers, rounds = 8, 40
	// warm up: the object node and its sentinel
	release(t, acquire(t, e, "w2", lock.Foreground, lock.AcquireOptions{}))
	p0, s0 := received(t, e), e.Health().Syncs
	pg0 := e.ParkGrants()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range rounds {
				g, err := e.Acquire(context.Background(), "w2", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				chk.turn(g)
				if err := g.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	chk.verify(t, callers*rounds)
	pk := received(t, e) - p0 - (e.Health().Syncs - s0)
	parked := e.ParkGrants() - pg0
	t.Logf("%d acquisitions: %d granted parked, %.2f requests each (syncs excluded)", callers*rounds, parked, float64(pk)/float64(callers*rounds))
	if parked < callers*rounds/2 {
		t.Errorf("%d of %d acquisitions were granted parked; want most", parked, callers*rounds)
	}
	// Without parking every contended acquisition is a create and reads
	// besides the release: ≥ 3 requests each.
	if per := float64(pk) / float64(callers*rounds); per > 2 {
		t.Errorf("%.2f requests per acquisition; want ≤ 2", per)
	}
	if k := children(t, rawConn(t, zkServer.Servers()), root, "w2"); len(k) != 1 {
		t.Errorf("children left: %v", k)
	}
}

func received(t testing.TB, e *lock.Engine) int64 {
	v, err := zkServer.Received(1, e.Health().SessionID)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A request of another engine that queues while one engine's callers take
// the object by turns through parking is not starved: one release multi
// may grant a parked request past it (that multi's answer shows it
// queued), then the parked requests queue behind it.
func TestParkRemotePassedOnceAtMost(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, native, parking, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
	other := newEngine(t, zkServer.Servers(), root, native)
	conn := rawConn(t, zkServer.Servers())
	release(t, acquire(t, e, "obj", lock.Foreground, lock.AcquireOptions{}))
	var chk overlapChecker
	var stop atomic.Bool
	var mu sync.Mutex
	var remoteQueued bool
	var trace []string // e's grants after the remote request queued
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				g, err := e.Acquire(context.Background(), "obj", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				chk.enter(g.Token())
				mu.Lock()
				if remoteQueued {
					trace = append(trace, g.Node())
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				chk.leave()
				if err := g.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()
	waitFor(t, 10*time.Second, "parking", func() bool { return e.ParkGrants() > 20 })
	for round := range 5 {
		mu.Lock()
		remoteQueued, trace = false, nil
		mu.Unlock()
		done := make(chan *lock.Grant, 1)
		go func() {
			g, err := other.Acquire(context.Background(), "obj", lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, RequestID: "remote"})
			if err != nil {
				t.Error(err)
			}
			done <- g
		}()
		// its child queued: from here on, count e's grants until it holds
		waitFor(t, 10*time.Second, "the remote request queued", func() bool {
			return slices.ContainsFunc(children(t, conn, root, "obj"), func(k string) bool {
				return strings.Contains(k, "remote")
			})
		})
		mu.Lock()
		remoteQueued = true
		mu.Unlock()
		g := <-done
		if g == nil {
			t.FailNow()
		}
		chk.enter(g.Token())
		mu.Lock()
		// passed: grants whose child sorts after the remote request's
		seq := func(node string) string { return node[strings.LastIndexByte(node, '_')+1:] }
		var passedBy []string
		for _, nd := range trace {
			if seq(nd) > seq(g.Node()) {
				passedBy = append(passedBy, nd)
			}
		}
		remoteQueued = false
		mu.Unlock()
		chk.leave()
		release(t, g)
		t.Logf("round %d: the remote request %s passed by %v", round, g.Node(), passedBy)
		// At most one parked request, granted by a multi whose answer
		// then showed the remote request queued.
		if len(passedBy) > 1 {
			t.Errorf("round %d: the remote request was passed by %d grants; want ≤ 1", round, len(passedBy))
		}
	}
	stop.Store(true)
	wg.Wait()
	chk.verify(t, -1)
}

// A parked request whose wait ends while it waits fails with
// InstanceLockError and leaves nothing; the holder's release then frees
// the object.
func TestParkTimeout(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, native, parking, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
	held := acquire(t, e, "to", lock.Foreground, lock.AcquireOptions{})
	p0 := e.Parks()
	_, err := e.Acquire(context.Background(), "to", lock.Foreground, lock.AcquireOptions{Wait: 200 * time.Millisecond})
	var ile *lock.InstanceLockError
	if !errors.As(err, &ile) {
		t.Fatalf("want InstanceLockError, got %v", err)
	}
	if e.Parks()-p0 != 1 {
		t.Errorf("parks = %d, want 1", e.Parks()-p0)
	}
	conn := rawConn(t, zkServer.Servers())
	if k := children(t, conn, root, "to"); len(k) != 2 {
		t.Errorf("children: %v (want the sentinel and the holder's)", k)
	}
	release(t, held)
	if k := children(t, conn, root, "to"); len(k) != 1 {
		t.Errorf("children left: %v", k)
	}
	release(t, acquire(t, e, "to", lock.Foreground, lock.AcquireOptions{}))
}

// Three engines on one object: five callers on the first, one on each of
// the others (pausing between turns, so the first engine has the object to
// itself at times). Foreground requests park behind their engine's holder,
// background ones and short waits mix in, some holders abandon. No two
// grants overlap, tokens rise, every failure is a wait that ran out, and
// nothing is left.
func TestParkStressEngines(t *testing.T) {
	root := testRoot(t, zkServer)
	var chk overlapChecker
	const rounds = 40
	var es []*lock.Engine
	var wg sync.WaitGroup
	for i, callers := range []int{5, 1, 1} {
		e := newEngine(t, zkServer.Servers(), root, native, parking, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
		es = append(es, e)
		for c := range callers {
			wg.Go(func() {
				for j := range rounds {
					if i > 0 {
						time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
					}
					typ, wait := lock.Foreground, 30*time.Second
					switch (i + c + j) % 7 {
					case 0:
						typ = lock.Background
					case 3:
						wait = time.Duration(1+rand.IntN(5)) * time.Millisecond
					}
					g, err := e.Acquire(context.Background(), "obj", typ, lock.AcquireOptions{Wait: wait})
					var ile *lock.InstanceLockError
					if errors.As(err, &ile) && wait < time.Second {
						continue
					}
					if err != nil {
						t.Errorf("engine %d caller %d: %v", i, c, err)
						return
					}
					chk.enter(g.Token())
					time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
					chk.leave()
					end := g.Release
					if j%11 == 5 {
						end = g.Abandon
					}
					if err := end(context.Background()); err != nil {
						t.Errorf("release: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	chk.verify(t, -1)
	conn := rawConn(t, zkServer.Servers())
	waitFor(t, 10*time.Second, "nothing left", func() bool { return len(children(t, conn, root, "obj")) == 1 })
	var parks, parked int64
	for _, e := range es {
		parks += e.Parks()
		parked += e.ParkGrants()
	}
	t.Logf("%d grants; %d requests parked, %d of them granted parked", chk.grants, parks, parked)
	if parked == 0 {
		t.Error("no request was granted parked")
	}
}

// A long hold with a request of its own engine parked behind it does not
// learn arrivals when its holder watch is armed: its release grants the
// parked request in its one write whoever else queued, so a listing per
// long hold would only double parking's one request per acquisition.
func TestParkLongHoldNoListing(t *testing.T) {
	set := func(o *lock.Options) {
		o.Protocol = lock.Native
		o.HolderWatchDelay = 200 * time.Millisecond
		o.AuditInterval = -1
	}
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, set, parking)
	var chk overlapChecker
	for round := range 3 {
		held := acquire(t, e, "plh", lock.Foreground, lock.AcquireOptions{})
		chk.enter(held.Token())
		p0, l0 := e.Parks(), e.LearnListings()
		got := acquireAsync(t, context.Background(), e, "plh", lock.Foreground, false)
		waitFor(t, 10*time.Second, "the request parked", func() bool { return e.Parks() > p0 })
		time.Sleep(300 * time.Millisecond) // the holder watch is armed meanwhile
		chk.leave()
		release(t, held)
		g := <-got
		if g == nil {
			return
		}
		chk.enter(g.Token())
		if n := e.LearnListings() - l0; n != 0 {
			t.Errorf("round %d: a long hold with a request parked behind it sent %d listings to learn arrivals", round, n)
		}
		chk.leave()
		release(t, g)
	}
	if chk.overlaps != 0 || chk.badToken != 0 {
		t.Errorf("overlaps=%d non-increasing tokens=%d", chk.overlaps, chk.badToken)
	}
}
