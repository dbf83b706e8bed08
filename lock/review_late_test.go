package lock_test

// Independent review of de3c84d: an uncontended native grant still held
// when its holder watch is armed (HolderWatchDelay) follows arrivals too
// (learnNative, late), its release lists only if the children watch fired
// since its last listing, and learnNative stops once a listing shows more
// than 64 children with no foreground waiter first.

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/testenv"
)

func lateSet(d time.Duration) func(*lock.Options) {
	return func(o *lock.Options) {
		o.Protocol = lock.Native
		o.HolderWatchDelay = d
		o.AuditInterval = -1
	}
}

// Many grants learn late (HolderWatchDelay 1 ms, holds of a few ms,
// sparse arrivals over 4 objects so that many grants are uncontended):
// several engines, shared and exclusive, foreground and background,
// waiters giving up at random. Never an exclusive grant beside another
// grant, exclusive tokens rising, nothing left behind, no hang.
func TestReviewLateStress(t *testing.T) {
	defer lock.SetLearnPause(time.Millisecond)()
	root := testRoot(t, zkServer)
	es := make([]*lock.Engine, 3)
	for i := range es {
		es[i] = newEngine(t, zkServer.Servers(), root, lateSet(time.Millisecond))
	}
	objs := []string{"st0", "st1", "st2", "st3"}
	chks := make([]rwChecker, len(objs))
	var lateN, grants atomic.Int64
	var wg sync.WaitGroup
	for i, e := range es {
		for w := range 3 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(i), uint64(w)))
				for j := range 25 {
					o := r.IntN(len(objs))
					shared := r.IntN(3) == 0
					typ := lock.Foreground
					if r.IntN(4) == 0 {
						typ = lock.Background
					}
					wait := time.Minute
					if r.IntN(5) == 0 {
						wait = time.Duration(1+r.IntN(10)) * time.Millisecond
					}
					g, err := e.Acquire(context.Background(), objs[o], typ, lock.AcquireOptions{Wait: wait, Shared: shared})
					if err != nil {
						if wait == time.Minute {
							t.Errorf("engine %d worker %d round %d: %v", i, w, j, err)
							return
						}
						continue
					}
					grants.Add(1)
					chks[o].enter(shared, g.Token())
					time.Sleep(time.Duration(r.IntN(8)) * time.Millisecond)
					chks[o].leave(shared)
					if late, _ := g.ReviewLateState(); late {
						lateN.Add(1)
					}
					if err := g.Release(context.Background()); err != nil {
						t.Error(err)
						return
					}
					time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
	for i := range chks {
		if c := &chks[i]; c.violations != 0 || c.badToken != 0 {
			t.Errorf("%s: violations=%d non-increasing exclusive tokens=%d (grants %d)", objs[i], c.violations, c.badToken, c.grants)
		}
	}
	var learn, rel int64
	for _, e := range es {
		learn += e.LearnListings()
		rel += e.ReleaseListings()
	}
	t.Logf("%d grants (%d learning late): %d learning listings, %d release listings", grants.Load(), lateN.Load(), learn, rel)
}

// lateGrant acquires obj on e uncontended and waits until it learns late
// (its holder watch armed, its first listing answered).
func lateGrant(t *testing.T, e *lock.Engine, obj string, shared bool) *lock.Grant {
	t.Helper()
	l0 := e.LearnListings()
	g := acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{Shared: shared})
	waitFor(t, 10*time.Second, "the grant learns late", func() bool {
		late, _ := g.ReviewLateState()
		return late && e.LearnListings() > l0
	})
	time.Sleep(20 * time.Millisecond) // its first listing answered (not a condition of any check)
	return g
}

type lateResult struct {
	g   *lock.Grant
	err error
}

func lateAcquire(e *lock.Engine, ctx context.Context, obj string, typ lock.Type, shared bool) chan lateResult {
	ch := make(chan lateResult, 1)
	go func() {
		g, err := e.Acquire(ctx, obj, typ, lock.AcquireOptions{Wait: time.Minute, Shared: shared})
		ch <- lateResult{g, err}
	}()
	return ch
}

// expectNone fails t if ch answers within d.
func expectNone(t *testing.T, ch chan lateResult, d time.Duration, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s answered: %v (%v)", what, r.g, r.err)
	case <-time.After(d):
	}
}

func expectGrant(t *testing.T, ch chan lateResult, what string) *lock.Grant {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.g
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no grant in 20 s", what)
	}
	return nil
}

// A late-learning holder learns a background waiter, then a foreground
// one that sorts ahead of it: its release names the foreground waiter
// (found with one read, no listing of its own), and the background one
// waits until that grant ends.
func TestReviewLateBackgroundThenForeground(t *testing.T) {
	root := testRoot(t, zkServer)
	a := newEngine(t, zkServer.Servers(), root, lateSet(5*time.Millisecond))
	b := newEngine(t, zkServer.Servers(), root, lateSet(time.Minute))
	c := newEngine(t, zkServer.Servers(), root, lateSet(time.Minute))
	var chk overlapChecker
	h := lateGrant(t, a, "bf", false)
	chk.enter(h.Token())
	bg := lateAcquire(b, context.Background(), "bf", lock.Background, false)
	waitFor(t, 10*time.Second, "the holder learns the background waiter", func() bool { return len(h.KnownNext()) == 1 })
	bgNode := h.KnownNext()[0]
	fg := lateAcquire(c, context.Background(), "bf", lock.Foreground, false)
	waitFor(t, 10*time.Second, "the holder learns the foreground waiter first", func() bool {
		n := h.KnownNext()
		return len(n) == 2 && n[1] == bgNode
	})
	time.Sleep(30 * time.Millisecond) // the waiter watches (not a condition of the test)
	l0 := c.Listings()
	chk.leave()
	release(t, h)
	g := expectGrant(t, fg, "the foreground waiter")
	chk.enter(g.Token())
	if n := c.Listings() - l0; n != 0 {
		t.Errorf("the foreground waiter listed %d times after the release: not named", n)
	}
	expectNone(t, bg, 200*time.Millisecond, "the background waiter, while the foreground one holds,")
	chk.leave()
	release(t, g)
	g = expectGrant(t, bg, "the background waiter")
	chk.turn(g)
	release(t, g)
	chk.verify(t, 3)
}

// More than 64 background waiters queue behind a late-learning holder (it
// stops re-listing), then a foreground one: the release names nobody it
// knows (background first), the foreground waiter takes the lock itself
// before any background one, and everything is given back.
func TestReviewLateLongBackgroundQueueForeground(t *testing.T) {
	defer lock.SetLearnPause(time.Millisecond)()
	root := testRoot(t, zkServer)
	a := newEngine(t, zkServer.Servers(), root, lateSet(5*time.Millisecond))
	b := newEngine(t, zkServer.Servers(), root, lateSet(time.Minute))
	c := newEngine(t, zkServer.Servers(), root, lateSet(time.Minute))
	conn := rawConn(t, zkServer.Servers())
	var chk overlapChecker
	h := lateGrant(t, a, "lq", false)
	chk.enter(h.Token())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var bgs []chan lateResult
	for range 70 {
		bgs = append(bgs, lateAcquire(b, ctx, "lq", lock.Background, false))
	}
	waitFor(t, 30*time.Second, "the background waiters queued", func() bool { return len(children(t, conn, root, "lq")) == 72 })
	time.Sleep(50 * time.Millisecond)
	fg := lateAcquire(c, context.Background(), "lq", lock.Foreground, false)
	waitFor(t, 10*time.Second, "the foreground waiter queued", func() bool { return len(children(t, conn, root, "lq")) == 73 })
	chk.leave()
	release(t, h)
	g := expectGrant(t, fg, "the foreground waiter")
	chk.enter(g.Token())
	for i, ch := range bgs {
		select {
		case r := <-ch:
			t.Fatalf("background waiter %d answered while the foreground one holds: %v %v", i, r.g, r.err)
		default:
		}
	}
	cancel()
	for _, ch := range bgs {
		if r := <-ch; r.err == nil {
			t.Errorf("a background waiter was granted while the foreground one held")
			r.g.Release(context.Background())
		}
	}
	chk.leave()
	release(t, g)
	chk.verify(t, 2)
}

// Shared: a late-learning reader's listing can run before its holder
// watch has read a co-reader's grant (two goroutines), so the co-reader's
// child is among the names it would hand over to, and the data it holds
// is older than the co-reader's take. Its release must not name the live
// co-reader (its token would change) nor pass the exclusive waiter: the
// multi's version guard makes it read again, and it leaves the co-reader
// holding, alone.
func TestReviewLateSharedCoHolderStaleView(t *testing.T) {
	root := testRoot(t, zkServer)
	a := newEngine(t, zkServer.Servers(), root, lateSet(5*time.Millisecond))
	b := newEngine(t, zkServer.Servers(), root, lateSet(time.Minute))
	c := newEngine(t, zkServer.Servers(), root, lateSet(time.Minute))
	conn := rawConn(t, zkServer.Servers())
	var chk rwChecker
	h := lateGrant(t, a, "sv", true)
	chk.enter(true, h.Token())
	stale := h.ReviewLateStaleView()
	co := acquire(t, b, "sv", lock.Foreground, lock.AcquireOptions{Shared: true})
	chk.enter(true, co.Token())
	ex := lateAcquire(c, context.Background(), "sv", lock.Foreground, false)
	waitFor(t, 10*time.Second, "the exclusive waiter queued", func() bool { return len(children(t, conn, root, "sv")) == 4 })
	var exNode string
	for _, k := range children(t, conn, root, "sv") {
		if k != "privateLock" && k != h.Node() && k != co.Node() {
			exNode = k
		}
	}
	stale([]string{co.Node(), exNode})
	chk.leave(true)
	release(t, h)
	d, _ := readObj(t, conn, root, "sv")
	if len(d.H) != 1 || d.H[0].R != co.RequestID() {
		t.Errorf("after the first reader's release the data names %+v, want the co-reader %s alone", d.H, co.RequestID())
	}
	if cur, _, err := b.Check(context.Background(), "sv", co.Token()); err != nil || !cur {
		t.Errorf("the co-reader's token %d is not current after the first reader's release: %v %v", co.Token(), cur, err)
	}
	expectNone(t, ex, 200*time.Millisecond, "the exclusive waiter, while a reader holds,")
	chk.leave(true)
	release(t, co)
	g := expectGrant(t, ex, "the exclusive waiter")
	chk.enter(false, g.Token())
	chk.leave(false)
	release(t, g)
	if chk.violations != 0 || chk.badToken != 0 {
		t.Errorf("violations=%d non-increasing tokens=%d", chk.violations, chk.badToken)
	}
}

// The holder watch comes due (learning, late, set) but learnNative's
// goroutine has not run yet when the release begins: the release lists
// nothing (the watch never fired), the waiter takes the lock itself, and
// the learnNative that runs after the grant ended sends no listing.
func TestReviewLateReleaseBeforeLearnRuns(t *testing.T) {
	root := testRoot(t, zkServer)
	a := newEngine(t, zkServer.Servers(), root, lateSet(5*time.Millisecond))
	b := newEngine(t, zkServer.Servers(), root, lateSet(time.Minute))
	conn := rawConn(t, zkServer.Servers())
	open := lock.PreviewHoldLearnStart()
	defer open()
	var chk overlapChecker
	h := acquire(t, a, "rl", lock.Foreground, lock.AcquireOptions{})
	chk.enter(h.Token())
	waitFor(t, 10*time.Second, "the holder watch armed", func() bool { late, _ := h.ReviewLateState(); return late })
	w := lateAcquire(b, context.Background(), "rl", lock.Foreground, false)
	waitFor(t, 10*time.Second, "the waiter queued", func() bool { return len(children(t, conn, root, "rl")) == 3 })
	l0, r0 := a.LearnListings(), a.ReleaseListings()
	chk.leave()
	release(t, h)
	g := expectGrant(t, w, "the waiter")
	chk.enter(g.Token())
	open()
	time.Sleep(100 * time.Millisecond)
	if n := a.ReleaseListings() - r0; n != 0 {
		t.Errorf("the release listed %d times though the watch never fired", n)
	}
	if n := a.LearnListings() - l0; n != 0 {
		t.Errorf("learnNative listed %d times after its grant's release", n)
	}
	chk.leave()
	release(t, g)
	chk.verify(t, 2)
}

// A late-learning holder's release fails (the object made unwritable, as
// an operator may): the grant stays held and keeps learning, so a waiter
// that queues afterwards is named by the release that then succeeds.
func TestReviewLateReleaseFailsKeepsLearning(t *testing.T) {
	root := testRoot(t, zkServer)
	a := newEngine(t, zkServer.Servers(), root, lateSet(5*time.Millisecond))
	c := newEngine(t, zkServer.Servers(), root, lateSet(time.Minute))
	conn := rawConn(t, zkServer.Servers())
	name, _ := lock.EscapeObject("rf")
	objPath := root + "/" + name
	var chk overlapChecker
	h := lateGrant(t, a, "rf", false)
	chk.enter(h.Token())
	t.Cleanup(func() { _, _ = conn.SetACL(objPath, zk.WorldACL(zk.PermAll), -1) })
	if _, err := conn.SetACL(objPath, zk.WorldACL(zk.PermAll&^zk.PermWrite), -1); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(context.Background()); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("release = %v, want ErrNoAuth", err)
	}
	if h.State() != lock.Held {
		t.Fatalf("after the failed release: %v", h.State())
	}
	w := lateAcquire(c, context.Background(), "rf", lock.Foreground, false)
	waitFor(t, 10*time.Second, "the holder learns the waiter", func() bool { return len(h.KnownNext()) == 1 })
	if _, err := conn.SetACL(objPath, zk.WorldACL(zk.PermAll), -1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond) // the waiter watches (not a condition of the test)
	l0 := c.Listings()
	chk.leave()
	release(t, h)
	g := expectGrant(t, w, "the waiter")
	chk.enter(g.Token())
	if n := c.Listings() - l0; n != 0 {
		t.Errorf("the waiter listed %d times after the release: not named", n)
	}
	chk.leave()
	release(t, g)
	chk.verify(t, 2)
}

// The holder watch comes due while a release is under way (its multi held
// in a proxy), and that release fails: releaseFailed arms the watch then,
// and the grant learns late from there, naming a waiter that queues.
func TestReviewLateArmDuringFailedRelease(t *testing.T) {
	root := testRoot(t, zkServer)
	p := testenv.ProxyT(t, zkServer.Addr(1))
	a := newEngine(t, []string{p.Addr()}, root, lateSet(300*time.Millisecond), func(o *lock.Options) { o.SessionTimeout = 10 * time.Second })
	c := newEngine(t, zkServer.Servers(), root, lateSet(time.Minute))
	conn := rawConn(t, zkServer.Servers())
	name, _ := lock.EscapeObject("ad")
	objPath := root + "/" + name
	var chk overlapChecker
	h := acquire(t, a, "ad", lock.Foreground, lock.AcquireOptions{})
	chk.enter(h.Token())
	t.Cleanup(func() { _, _ = conn.SetACL(objPath, zk.WorldACL(zk.PermAll), -1) })
	if _, err := conn.SetACL(objPath, zk.WorldACL(zk.PermAll&^zk.PermWrite), -1); err != nil {
		t.Fatal(err)
	}
	if h.Learning() {
		t.Fatal("learning before the holder watch is due")
	}
	p.HoldUpstream()
	rel := make(chan error, 1)
	go func() { rel <- h.Release(context.Background()) }()
	waitFor(t, 10*time.Second, "the release began", h.Releasing)
	time.Sleep(500 * time.Millisecond) // the holder watch comes due meanwhile
	if h.Learning() {
		t.Fatal("learning began during the release")
	}
	p.Heal()
	if err := <-rel; !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("release = %v, want ErrNoAuth", err)
	}
	waitFor(t, 10*time.Second, "the grant learns once its release failed", func() bool { late, _ := h.ReviewLateState(); return late })
	w := lateAcquire(c, context.Background(), "ad", lock.Foreground, false)
	waitFor(t, 10*time.Second, "the holder learns the waiter", func() bool { return len(h.KnownNext()) == 1 })
	if _, err := conn.SetACL(objPath, zk.WorldACL(zk.PermAll), -1); err != nil {
		t.Fatal(err)
	}
	chk.leave()
	release(t, h)
	g := expectGrant(t, w, "the waiter")
	chk.turn(g)
	release(t, g)
	chk.verify(t, 2)
}

// Parking: a late-learning holder has a local request parked behind it
// and learns a remote waiter. Its release names the remote waiter; the
// parked request queues and is granted after it. Never two holders.
func TestReviewLateParkedAndRemote(t *testing.T) {
	root := testRoot(t, zkServer)
	a := newEngine(t, zkServer.Servers(), root, lateSet(5*time.Millisecond), parking)
	b := newEngine(t, zkServer.Servers(), root, lateSet(time.Minute))
	var chk overlapChecker
	h := lateGrant(t, a, "pk", false)
	chk.enter(h.Token())
	p0 := a.Parks()
	pk := lateAcquire(a, context.Background(), "pk", lock.Foreground, false)
	waitFor(t, 10*time.Second, "parked", func() bool { return a.Parks() > p0 })
	w := lateAcquire(b, context.Background(), "pk", lock.Foreground, false)
	waitFor(t, 10*time.Second, "the holder learns the remote waiter", func() bool { return len(h.KnownNext()) == 1 })
	chk.leave()
	release(t, h)
	var first, second chan lateResult
	select {
	case r := <-w:
		w <- r
		first, second = w, pk
	case r := <-pk:
		pk <- r
		first, second = pk, w
		t.Logf("the parked request went first")
	case <-time.After(20 * time.Second):
		t.Fatal("nobody granted after the release")
	}
	g := expectGrant(t, first, "first")
	chk.enter(g.Token())
	expectNone(t, second, 200*time.Millisecond, "the second, while the first holds,")
	chk.leave()
	release(t, g)
	g = expectGrant(t, second, "second")
	chk.turn(g)
	release(t, g)
	chk.verify(t, 3)
}

// The holder's engine closes while it learns with a waiter known: the
// waiter is granted (its session's children go), nothing is left, and
// Close does not wait on the learning goroutine.
func TestReviewLateEngineClose(t *testing.T) {
	root := testRoot(t, zkServer)
	a := newEngine(t, zkServer.Servers(), root, lateSet(5*time.Millisecond))
	b := newEngine(t, zkServer.Servers(), root, lateSet(time.Minute))
	h := lateGrant(t, a, "cl", false)
	w := lateAcquire(b, context.Background(), "cl", lock.Foreground, false)
	waitFor(t, 10*time.Second, "the holder learns the waiter", func() bool { return len(h.KnownNext()) == 1 })
	done := make(chan struct{})
	go func() { a.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs")
	}
	g := expectGrant(t, w, "the waiter")
	if g.Token() <= h.Token() {
		t.Errorf("token %d after %d", g.Token(), h.Token())
	}
	release(t, g)
}

// A contended grant (it queued) with nobody known behind it learns
// arrivals from its grant on (granted). Its holder-watch timer is set in
// grant, before granted marks it learning: if the timer fires first (a
// short HolderWatchDelay, or the acquiring goroutine stalled that long
// under load), armLocked takes the grant for an uncontended one and
// starts a late learnNative, and granted starts a second one: two
// listings per arrival, two listings in flight where learnBeforeRelease
// joins "the" one, and the quiet rule (late) applied to a contended grant.
func TestReviewLateContendedGrantLearnsOnce(t *testing.T) {
	root := testRoot(t, zkServer)
	a := newEngine(t, zkServer.Servers(), root, lateSet(time.Minute))
	b := newEngine(t, zkServer.Servers(), root, lateSet(5*time.Millisecond))
	c := newEngine(t, zkServer.Servers(), root, lateSet(time.Minute))
	conn := rawConn(t, zkServer.Servers())
	h := acquire(t, a, "co", lock.Foreground, lock.AcquireOptions{})
	w := lateAcquire(b, context.Background(), "co", lock.Foreground, false)
	waitFor(t, 10*time.Second, "b queued", func() bool { return len(children(t, conn, root, "co")) == 3 })
	time.Sleep(20 * time.Millisecond) // b watches (not a condition of the check)
	starts, remove := lock.ReviewStallAfterRegister(b, 200*time.Millisecond)
	defer remove()
	release(t, h)
	g := expectGrant(t, w, "b")
	waitFor(t, 10*time.Second, "b's grant learns", g.Learning)
	time.Sleep(100 * time.Millisecond)
	if n := starts.Load(); n != 1 {
		t.Errorf("%d learnNative goroutines started for one grant, want 1", n)
	}
	if late, _ := g.ReviewLateState(); late {
		t.Errorf("a contended grant is marked late (its release skips the listing when the watch did not fire)")
	}
	l0 := b.LearnListings()
	x := lateAcquire(c, context.Background(), "co", lock.Foreground, false)
	waitFor(t, 10*time.Second, "b's grant learns the waiter", func() bool { return len(g.KnownNext()) == 1 })
	time.Sleep(50 * time.Millisecond)
	if n := b.LearnListings() - l0; n != 1 {
		t.Errorf("one arrival cost %d listings, want 1", n)
	}
	release(t, g)
	g = expectGrant(t, x, "c")
	release(t, g)
}

// A late-learning holder knows a foreground waiter (and stops listing:
// nobody can sort ahead of it), which then gives up; a second waiter
// queues unseen. The release's check skips the gone waiter (the data
// never names it), and the second waiter is granted.
func TestReviewLateNamedWaiterLeft(t *testing.T) {
	root := testRoot(t, zkServer)
	a := newEngine(t, zkServer.Servers(), root, lateSet(5*time.Millisecond))
	b := newEngine(t, zkServer.Servers(), root, lateSet(time.Minute))
	c := newEngine(t, zkServer.Servers(), root, lateSet(time.Minute))
	conn := rawConn(t, zkServer.Servers())
	var chk overlapChecker
	h := lateGrant(t, a, "wl", false)
	chk.enter(h.Token())
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	w1 := lateAcquire(b, ctx1, "wl", lock.Foreground, false)
	waitFor(t, 10*time.Second, "the holder learns w1", func() bool { return len(h.KnownNext()) == 1 })
	w1Node := h.KnownNext()[0]
	cancel1()
	if r := <-w1; r.err == nil {
		t.Fatal("w1 granted after its ctx ended")
	}
	w2 := lateAcquire(c, context.Background(), "wl", lock.Foreground, false)
	waitFor(t, 10*time.Second, "w2 queued", func() bool { return len(children(t, conn, root, "wl")) == 3 })
	time.Sleep(50 * time.Millisecond)
	t.Logf("the holder knows %v (w1 %s)", h.KnownNext(), w1Node)
	chk.leave()
	release(t, h)
	d, _ := readObj(t, conn, root, "wl")
	for _, x := range d.H {
		if containsReq(w1Node, x.R) {
			t.Errorf("the release named the gone waiter: %+v", d.H)
		}
	}
	g := expectGrant(t, w2, "w2")
	chk.turn(g)
	release(t, g)
	chk.verify(t, 2)
}

func containsReq(node, req string) bool {
	return len(req) > 0 && len(node) > len(req) && node[4:4+len(req)] == req
}

// The holder's session ends while it learns with a waiter known (its
// connection black-holed past the session timeout): the grant is lost,
// the waiter is granted after it, nothing is left and nothing hangs.
func TestReviewLateSessionLost(t *testing.T) {
	root := testRoot(t, zkServer)
	p := testenv.ProxyT(t, zkServer.Addr(1))
	a := newEngine(t, []string{p.Addr()}, root, lateSet(5*time.Millisecond), func(o *lock.Options) { o.SessionTimeout = 2 * time.Second })
	b := newEngine(t, zkServer.Servers(), root, lateSet(time.Minute))
	h := lateGrant(t, a, "sl", false)
	w := lateAcquire(b, context.Background(), "sl", lock.Foreground, false)
	waitFor(t, 10*time.Second, "the holder learns the waiter", func() bool { return len(h.KnownNext()) == 1 })
	p.BlackHole()
	select {
	case <-h.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the grant outlived its session")
	}
	if h.State() != lock.Lost {
		t.Errorf("after the session's end: %v", h.State())
	}
	g := expectGrant(t, w, "the waiter")
	if g.Token() <= h.Token() {
		t.Errorf("token %d after %d", g.Token(), h.Token())
	}
	if err := h.Release(context.Background()); err == nil {
		t.Errorf("the lost grant's release succeeded")
	}
	p.Heal()
	release(t, g)
}

// The holder's connection is reset while it learns (its listing may fail,
// ending learnNative): after the reconnect the grant still holds, a
// waiter that queues then is granted after the release, never beside it.
func TestReviewLateReconnect(t *testing.T) {
	root := testRoot(t, zkServer)
	p := testenv.ProxyT(t, zkServer.Addr(1))
	a := newEngine(t, []string{p.Addr()}, root, lateSet(5*time.Millisecond), func(o *lock.Options) { o.SessionTimeout = 10 * time.Second })
	b := newEngine(t, zkServer.Servers(), root, lateSet(time.Minute))
	conn := rawConn(t, zkServer.Servers())
	var chk overlapChecker
	for round := range 3 {
		obj := "rc" + string(rune('0'+round))
		h := lateGrant(t, a, obj, false)
		chk.enter(h.Token())
		p.ResetConnections()
		waitFor(t, 20*time.Second, "reconnected", func() bool { return a.Health().Connected && h.State() == lock.Held })
		w := lateAcquire(b, context.Background(), obj, lock.Foreground, false)
		waitFor(t, 10*time.Second, "the waiter queued", func() bool { return len(children(t, conn, root, obj)) == 3 })
		expectNone(t, w, 100*time.Millisecond, "the waiter, while the holder holds,")
		waitFor(t, 20*time.Second, "the grant held again", func() bool { return h.State() == lock.Held })
		t.Logf("round %d: the holder knows %v", round, h.KnownNext())
		chk.leave()
		release(t, h)
		g := expectGrant(t, w, "the waiter")
		chk.turn(g)
		release(t, g)
	}
	chk.verify(t, 6)
}
