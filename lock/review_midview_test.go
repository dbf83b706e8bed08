package lock_test

// Review of cdd2d7d (mreview): a native waiter whose view shows a holder
// named in the data with its child gone (localRelease, one read of the
// data) and every request entering the slow path counting as contended.

import (
	"context"
	"errors"
	"path"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/testenv"
)

func midviewNative(o *lock.Options) {
	o.Protocol = lock.Native
	o.HolderWatchDelay = time.Minute
	o.AuditInterval = -1
}

// A request that meets nobody does not follow arrivals: the slow path
// taken because the object node did not exist yet (a first acquire of an
// object), or because a lock-delay is set (every acquire then queues),
// is no contention. Following arrivals costs the grant a listing with a
// watch, and its release a second listing (learnBeforeRelease).
func TestReviewMidviewUncontendedNoLearning(t *testing.T) {
	for _, c := range []struct {
		name  string
		delay time.Duration
	}{{"fresh-object", 0}, {"lock-delay", 2 * time.Second}} {
		t.Run(c.name, func(t *testing.T) {
			root := testRoot(t, zkServer)
			e := newEngine(t, zkServer.Servers(), root, midviewNative, func(o *lock.Options) { o.LockDelay = c.delay })
			for i := range 3 {
				l0, r0 := e.LearnListings(), e.ReleaseListings()
				g := acquire(t, e, "solo", lock.Foreground, lock.AcquireOptions{})
				learning := g.Learning()
				release(t, g)
				if learning || e.LearnListings() != l0 || e.ReleaseListings() != r0 {
					t.Errorf("acquire %d alone: learning=%v, %d learn listings, %d release listings", i, learning, e.LearnListings()-l0, e.ReleaseListings()-r0)
				}
			}
		})
	}
}

// midviewPath returns the object node's path.
func midviewPath(t *testing.T, root, obj string) string {
	name, err := lock.EscapeObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	return path.Join(root, name)
}

// A holder of this engine whose child an operator deleted while it holds
// is not releasing: a waiter of the same engine must not wait for its end
// (it may hold for an hour). Before the waiter came (its view shows the
// holder dead: localRelease), and while the waiter watched that child
// (the watch fires on the deletion).
func TestReviewMidviewDeletedHolderChildNoHang(t *testing.T) {
	for _, order := range []string{"deleted-then-waiter", "waiter-then-deleted"} {
		t.Run(order, func(t *testing.T) {
			root := testRoot(t, zkServer)
			// (the holder's watch armed at once: it learns it is named no more)
			e := newEngine(t, zkServer.Servers(), root, midviewNative, func(o *lock.Options) { o.HolderWatchDelay = 0 })
			conn := rawConn(t, zkServer.Servers())
			obj := midviewPath(t, root, "dh")
			g := acquire(t, e, "dh", lock.Foreground, lock.AcquireOptions{})
			defer g.Release(context.Background())
			del := func() {
				if err := conn.Delete(obj+"/"+g.Node(), -1); err != nil {
					t.Fatal(err)
				}
			}
			if order == "deleted-then-waiter" {
				del()
			}
			ch := make(chan error, 1)
			var w *lock.Grant
			go func() {
				var err error
				w, err = e.Acquire(context.Background(), "dh", lock.Foreground, lock.AcquireOptions{Wait: 15 * time.Second})
				ch <- err
			}()
			if order == "waiter-then-deleted" {
				waitFor(t, 10*time.Second, "waiter queued", func() bool { return len(children(t, conn, root, "dh")) == 3 })
				// (watching the holder's child: not a bound, a likelihood)
				time.Sleep(300 * time.Millisecond)
				del()
			}
			if err := <-ch; err != nil {
				t.Fatalf("waiter behind a holder whose child was deleted: %v (holder state %v)", err, g.State())
			}
			// the holder, named no more, is lost (no overlap once it knows)
			waitFor(t, 10*time.Second, "holder lost", func() bool { return g.State() == lock.Lost })
			release(t, w)
		})
	}
}

// A holder that truly vanished (named in the data, its child gone, no
// release on its way) is waited out with the lock-delay as before: the
// one read of the data finds it unchanged. Its holder on another engine,
// and on the waiter's own engine (its child deleted while it holds: not
// releasing, not waited for). The waiter's session sends a bounded number
// of packets meanwhile (no loop of reads while the delay runs).
func TestReviewMidviewVanishedHolderWaitsDelay(t *testing.T) {
	const delay = 1500 * time.Millisecond
	for _, where := range []string{"other-engine", "same-engine"} {
		t.Run(where, func(t *testing.T) {
			root := testRoot(t, zkServer)
			b := newEngine(t, zkServer.Servers(), root, midviewNative, func(o *lock.Options) { o.LockDelay = delay })
			a := b
			if where == "other-engine" {
				a = newEngine(t, zkServer.Servers(), root, midviewNative)
			}
			conn := rawConn(t, zkServer.Servers())
			g := acquire(t, a, "vh", lock.Foreground, lock.AcquireOptions{})
			defer g.Release(context.Background())
			if err := conn.Delete(midviewPath(t, root, "vh")+"/"+g.Node(), -1); err != nil {
				t.Fatal(err)
			}
			sid := b.Health().SessionID
			p0, err := zkServer.Received(1, sid)
			if err != nil {
				t.Fatal(err)
			}
			d0 := b.Health().LockDelays
			w := acquire(t, b, "vh", lock.Foreground, lock.AcquireOptions{})
			p1, err := zkServer.Received(1, sid)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("waited %v, %d packets from the waiter's session", w.Waited(), p1-p0)
			if n := b.Health().LockDelays - d0; n != 1 || w.Waited() < delay {
				t.Errorf("granted after %v with %d lock-delays waited out; want the delay %v waited once", w.Waited(), n, delay)
			}
			if w.Token() <= g.Token() {
				t.Errorf("token %d after the vanished holder's %d", w.Token(), g.Token())
			}
			// reads, a take, a ping or two; a loop of reads is hundreds
			if p1-p0 > 40 {
				t.Errorf("%d packets while one waiter waited out a lock-delay of %v", p1-p0, delay)
			}
			release(t, w)
		})
	}
}

// A waiter whose view shows a releasing holder of its engine with its
// child gone waits for that release to end (localRelease). The release
// here is held back (its learnNative listing in flight, which it waits
// for) after an operator deleted its child. ctx-ends: the waiter's ctx
// ends meanwhile: it returns at once and leaves no node. release-ends:
// the release ends (lost: its child was gone) and the waiter is granted
// after it, with a greater token.
func TestReviewMidviewWaitsForLocalRelease(t *testing.T) {
	for _, c := range []string{"ctx-ends", "release-ends", "object-deleted"} {
		t.Run(c, func(t *testing.T) {
			root := testRoot(t, zkServer)
			e := newEngine(t, zkServer.Servers(), root, midviewNative)
			conn := rawConn(t, zkServer.Servers())
			obj := midviewPath(t, root, "lr")
			h0 := acquire(t, e, "lr", lock.Foreground, lock.AcquireOptions{})
			inHook, unblock := make(chan struct{}, 8), make(chan struct{})
			restore := lock.SetLearnListHook(func() {
				inHook <- struct{}{}
				<-unblock
			})
			unblocked := false
			release := func() {
				if !unblocked {
					unblocked = true
					close(unblock)
				}
			}
			defer restore()
			defer release()
			gch := make(chan *lock.Grant, 1)
			go func() {
				g, err := e.Acquire(context.Background(), "lr", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
				if err != nil {
					t.Error(err)
				}
				gch <- g
			}()
			waitFor(t, 10*time.Second, "g queued", func() bool { return len(children(t, conn, root, "lr")) == 3 })
			if err := h0.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			g := <-gch
			if g == nil {
				t.FailNow()
			}
			// g is contended and knows of nobody behind: it follows
			// arrivals, its first listing held back in the hook
			select {
			case <-inHook:
			case <-time.After(10 * time.Second):
				t.Fatal("g follows no arrivals")
			}
			if err := conn.Delete(obj+"/"+g.Node(), -1); err != nil {
				t.Fatal(err)
			}
			rerr := make(chan error, 1)
			go func() { rerr <- g.Release(context.Background()) }()
			waitFor(t, 10*time.Second, "g releasing", g.Releasing)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			l0 := e.Listings()
			wch := make(chan error, 1)
			var w *lock.Grant
			go func() {
				var err error
				w, err = e.Acquire(ctx, "lr", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
				wch <- err
			}()
			// the waiter's view is answered (it shows g named, its child
			// gone); it now waits for g's release
			waitFor(t, 10*time.Second, "the waiter's view", func() bool { return e.Listings() > l0 })
			time.Sleep(200 * time.Millisecond) // a likelihood, not a bound
			select {
			case err := <-wch:
				t.Fatalf("waiter returned (%v) while the release it follows is held back", err)
			default:
			}
			if c == "ctx-ends" {
				cancel()
				select {
				case err := <-wch:
					if err == nil {
						t.Fatal("granted after its ctx ended, with the release held back")
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the waiter did not return when its ctx ended")
				}
				release()
				<-rerr
				return
			}
			if c == "object-deleted" {
				// an operator's deleteall meanwhile: the waiter queues
				// again (the object made anew), as when its listing
				// finds the object gone
				midviewDeleteAll(t, conn, obj)
			}
			release()
			if err := <-rerr; err == nil {
				t.Log("g's release reported no loss")
			}
			if err := <-wch; err != nil {
				t.Fatalf("waiter after the release: %v", err)
			}
			if w.Token() <= g.Token() {
				t.Errorf("token %d after g's %d", w.Token(), g.Token())
			}
			if g.State() == lock.Held {
				t.Errorf("waiter granted while g holds")
			}
			if err := w.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A handoff left in a waiter's channel for a child it no longer has is
// not taken by localRelease. A shared waiter W waits out a lock-delay (a
// vanished holder) and reads no handoff meanwhile; a shared request of
// the same engine without a delay takes past it, and its release hands
// the lock to W in process. An operator deletes W's child before W looks
// again: W queues again under a new request id and child, and its view
// shows its old id named with its child gone — the stale handoff names
// that old child. W must be granted by a take of its own: its token
// current (Check) and greater than the holder's before.
func TestReviewMidviewStaleHandoffAfterRenew(t *testing.T) {
	const delay = 2 * time.Second
	root := testRoot(t, zkServer)
	a := newEngine(t, zkServer.Servers(), root, midviewNative)
	e := newEngine(t, zkServer.Servers(), root, midviewNative)
	conn := rawConn(t, zkServer.Servers())
	obj := midviewPath(t, root, "sh")
	d := acquire(t, a, "sh", lock.Foreground, lock.AcquireOptions{})
	defer d.Release(context.Background())
	if err := conn.Delete(obj+"/"+d.Node(), -1); err != nil { // d vanished
		t.Fatal(err)
	}
	wch := make(chan error, 1)
	var w *lock.Grant
	go func() {
		var err error
		w, err = e.Acquire(context.Background(), "sh", lock.Foreground, lock.AcquireOptions{Shared: true, LockDelay: delay, Wait: time.Minute})
		wch <- err
	}()
	waitFor(t, 10*time.Second, "W waits out the delay", func() bool { return e.Health().LockDelays == 1 })
	kids := children(t, conn, root, "sh")
	if len(kids) != 2 {
		t.Fatalf("children %v", kids)
	}
	n1 := kids[0]
	if n1 == "privateLock" {
		n1 = kids[1]
	}
	r := acquire(t, e, "sh", lock.Foreground, lock.AcquireOptions{Shared: true})
	l0 := e.LocalHandoffs()
	release(t, r)
	if e.LocalHandoffs() != l0+1 {
		t.Fatalf("R's release handed over in process %d times; the test needs 1", e.LocalHandoffs()-l0)
	}
	if err := conn.Delete(obj+"/"+n1, -1); err != nil { // W's child, named by R's release
		t.Fatal(err)
	}
	select {
	case err := <-wch:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("W never granted")
	}
	defer release(t, w)
	if w.Node() == n1 {
		t.Fatalf("W granted on its deleted child %s", n1)
	}
	cur, holder, err := e.Check(context.Background(), "sh", w.Token())
	if err != nil {
		t.Fatal(err)
	}
	if !cur || w.Token() <= r.Token() {
		t.Errorf("W granted with token %d (current %v, holder's %d; R's was %d): a stale handoff", w.Token(), cur, holder, r.Token())
	}
}

// Shared holders, two live (one of this engine) and one vanished: a
// shared request is granted beside the live ones by one take (nothing
// refused), its token current; an exclusive request queued behind them
// all is granted once the live ones release, after the shared one.
func TestReviewMidviewSharedLiveAndDead(t *testing.T) {
	root := testRoot(t, zkServer)
	a := newEngine(t, zkServer.Servers(), root, midviewNative)
	e := newEngine(t, zkServer.Servers(), root, midviewNative)
	conn := rawConn(t, zkServer.Servers())
	obj := midviewPath(t, root, "sl")
	sh := lock.AcquireOptions{Shared: true}
	s1 := acquire(t, e, "sl", lock.Foreground, sh)
	s2 := acquire(t, a, "sl", lock.Foreground, sh)
	s3 := acquire(t, a, "sl", lock.Foreground, sh)
	defer s2.Release(context.Background())
	if err := conn.Delete(obj+"/"+s2.Node(), -1); err != nil { // s2 vanished
		t.Fatal(err)
	}
	f0 := e.RefusedTakes()
	w := acquire(t, e, "sl", lock.Foreground, sh)
	if n := e.RefusedTakes() - f0; n != 0 {
		t.Errorf("%d takes refused with nobody writing", n)
	}
	for _, g := range []*lock.Grant{s1, s3, w} {
		cur, _, err := e.Check(context.Background(), "sl", g.Token())
		if err != nil || !cur {
			t.Errorf("shared holder with token %d not current: %v %v", g.Token(), cur, err)
		}
	}
	xch := make(chan *lock.Grant, 1)
	go func() {
		x, err := e.Acquire(context.Background(), "sl", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		xch <- x
	}()
	waitFor(t, 10*time.Second, "x queued", func() bool { return len(children(t, conn, root, "sl")) == 5 })
	for _, g := range []*lock.Grant{s1, s3, w} {
		select {
		case <-xch:
			t.Fatal("exclusive granted beside shared holders")
		default:
		}
		release(t, g)
	}
	x := <-xch
	if x == nil {
		t.FailNow()
	}
	if x.Token() <= w.Token() {
		t.Errorf("exclusive token %d after shared %d", x.Token(), w.Token())
	}
	release(t, x)
}

// A release of another engine that names nobody (its waiter is
// background: no successor is named) lands between a waiter's two reads:
// the one read of the data shows it changed, and the waiter lists again
// before its take instead of sending a take the version refuses. Ping-pong
// across two engines, releasing the moment the waiter's child exists.
func TestReviewMidviewRemoteReleaseNamesNobody(t *testing.T) {
	root := testRoot(t, zkServer)
	es := []*lock.Engine{newEngine(t, zkServer.Servers(), root, midviewNative), newEngine(t, zkServer.Servers(), root, midviewNative)}
	conn := rawConn(t, zkServer.Servers())
	const rounds = 40
	var chk overlapChecker
	held := acquire(t, es[0], "rn", lock.Background, lock.AcquireOptions{})
	chk.enter(held.Token())
	refused := func() int64 { return es[0].RefusedTakes() + es[1].RefusedTakes() }
	r0 := refused()
	for i := range rounds {
		ch := make(chan *lock.Grant, 1)
		go func() {
			g, err := es[(i+1)%2].Acquire(context.Background(), "rn", lock.Background, lock.AcquireOptions{Wait: time.Minute})
			if err != nil {
				t.Error(err)
			}
			ch <- g
		}()
		deadline := time.Now().Add(10 * time.Second)
		for len(children(t, conn, root, "rn")) < 3 {
			if time.Now().After(deadline) {
				t.Fatal("the waiter never queued")
			}
		}
		chk.leave()
		release(t, held)
		held = <-ch
		if held == nil {
			t.FailNow()
		}
		chk.enter(held.Token())
	}
	chk.leave()
	release(t, held)
	n := refused() - r0
	t.Logf("%d handoffs naming nobody across two engines: %d takes refused", rounds, n)
	if chk.overlaps != 0 || chk.badToken != 0 || chk.grants != rounds+1 {
		t.Errorf("overlaps=%d non-increasing tokens=%d grants=%d", chk.overlaps, chk.badToken, chk.grants)
	}
	if n > rounds/20 {
		t.Errorf("%d of %d handoffs sent a take that the release's write refused", n, rounds)
	}
}

// An operator deletes the object (deleteall) while a waiter watches its
// holder's child: the waiter queues again (the object made anew) and is
// granted, as when its listing finds the object gone; not an acquire
// failing with ZooKeeper's NoNode.
func TestReviewMidviewObjectDeletedWhileWatching(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, midviewNative)
	conn := rawConn(t, zkServer.Servers())
	obj := midviewPath(t, root, "od")
	g := acquire(t, e, "od", lock.Foreground, lock.AcquireOptions{})
	defer g.Release(context.Background())
	wch := make(chan error, 1)
	var w *lock.Grant
	go func() {
		var err error
		w, err = e.Acquire(context.Background(), "od", lock.Foreground, lock.AcquireOptions{Wait: 15 * time.Second})
		wch <- err
	}()
	waitFor(t, 10*time.Second, "queued", func() bool { return len(children(t, conn, root, "od")) == 3 })
	time.Sleep(300 * time.Millisecond)
	midviewDeleteAll(t, conn, obj)
	if err := <-wch; err != nil {
		t.Fatalf("waiter after the object was deleted: %v", err)
	}
	release(t, w)
}

// midviewDeleteAll deletes the object node and all under it in one multi
// (an operator's deleteall, atomic: the engine may create meanwhile).
func midviewDeleteAll(t *testing.T, conn *zk.Conn, obj string) {
	t.Helper()
	for range 20 {
		var ops []any
		kids, _, err := conn.Children(obj)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range kids {
			sub, _, err := conn.Children(obj + "/" + k)
			if err != nil {
				continue
			}
			for _, s := range sub {
				ops = append(ops, &zk.DeleteRequest{Path: obj + "/" + k + "/" + s, Version: -1})
			}
			ops = append(ops, &zk.DeleteRequest{Path: obj + "/" + k, Version: -1})
		}
		ops = append(ops, &zk.DeleteRequest{Path: obj, Version: -1})
		if _, err := conn.Multi(ops...); err == nil {
			return
		}
	}
	t.Fatalf("could not delete %s", obj)
}

// The connection is cut while a waiter waits for its engine's releasing
// holder (localRelease) and the release is on its way: the release ends,
// the waiter is not stuck on it, and it is granted after the holder or
// fails with the session — never beside it. (Here the release waits for
// its learnNative listing in flight, answered by nothing: both end with
// the session, ~3 s after the cut with a 4 s timeout.)
func TestReviewMidviewConnectionCutDuringLocalRelease(t *testing.T) {
	root := testRoot(t, zkServer)
	p := testenv.ProxyT(t, zkServer.Addr(1))
	e := newEngine(t, []string{p.Addr()}, root, midviewNative, func(o *lock.Options) { o.SessionTimeout = 4 * time.Second })
	conn := rawConn(t, zkServer.Servers())
	obj := midviewPath(t, root, "cc")
	h0 := acquire(t, e, "cc", lock.Foreground, lock.AcquireOptions{})
	inHook, unblock := make(chan struct{}, 8), make(chan struct{})
	restore := lock.SetLearnListHook(func() {
		inHook <- struct{}{}
		<-unblock
	})
	defer restore()
	unblocked := false
	defer func() {
		if !unblocked {
			close(unblock)
		}
	}()
	gch := make(chan *lock.Grant, 1)
	go func() {
		g, err := e.Acquire(context.Background(), "cc", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		gch <- g
	}()
	waitFor(t, 10*time.Second, "g queued", func() bool { return len(children(t, conn, root, "cc")) == 3 })
	release(t, h0)
	g := <-gch
	if g == nil {
		t.FailNow()
	}
	<-inHook
	if err := conn.Delete(obj+"/"+g.Node(), -1); err != nil {
		t.Fatal(err)
	}
	rerr := make(chan error, 1)
	go func() { rerr <- g.Release(context.Background()) }()
	waitFor(t, 10*time.Second, "g releasing", g.Releasing)
	l0 := e.Listings()
	wch := make(chan error, 1)
	var w *lock.Grant
	go func() {
		var err error
		w, err = e.Acquire(context.Background(), "cc", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
		wch <- err
	}()
	waitFor(t, 10*time.Second, "the waiter's view", func() bool { return e.Listings() > l0 })
	time.Sleep(200 * time.Millisecond) // a likelihood, not a bound
	p.BlackHole()
	unblocked = true
	close(unblock)
	select {
	case <-rerr:
	case <-time.After(30 * time.Second):
		t.Fatal("the release never ended with the connection cut")
	}
	p.Heal()
	p.ResetConnections()
	select {
	case err := <-wch:
		if err != nil {
			t.Logf("waiter: %v", err)
			if !errors.Is(err, lock.ErrSessionLost) {
				t.Errorf("waiter failed with %v; want granted, or the session lost", err)
			}
			return
		}
	case <-time.After(40 * time.Second):
		t.Fatal("the waiter is stuck")
	}
	if g.State() == lock.Held {
		t.Errorf("waiter granted while g holds")
	}
	if w.Token() <= g.Token() {
		t.Errorf("token %d after g's %d", w.Token(), g.Token())
	}
	if cur, _, err := e.Check(context.Background(), "cc", w.Token()); err != nil || !cur {
		t.Errorf("waiter's token %d not current: %v %v", w.Token(), cur, err)
	}
	release(t, w)
}
