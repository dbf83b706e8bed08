package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
)

// A native holder granted with nobody known behind it follows arrivals
// (learnNative). Its release lists the object itself only when something
// changed since that listing and no listing of it is in flight: with
// nobody arrived it lists nothing, and a waiter that arrived just before
// the release is named from the holder's own listing, not from a second
// one queued behind it.
func TestNativeReleaseListsOnlyAfterChange(t *testing.T) {
	set := func(o *lock.Options) { o.Protocol = lock.Native; o.HolderWatchDelay = time.Minute }

	t.Run("nobody-arrived", func(t *testing.T) {
		root := testRoot(t, zkServer)
		a := newEngine(t, zkServer.Servers(), root, set)
		b := newEngine(t, zkServer.Servers(), root, set)
		ha := acquire(t, a, "o", lock.Foreground, lock.AcquireOptions{})
		ch := make(chan *lock.Grant, 1)
		go func() {
			g, err := b.Acquire(context.Background(), "o", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
			if err != nil {
				t.Error(err)
			}
			ch <- g
		}()
		conn := rawConn(t, zkServer.Servers())
		waitFor(t, 10*time.Second, "b queued", func() bool { return len(children(t, conn, root, "o")) >= 3 })
		time.Sleep(100 * time.Millisecond) // b is watching: its grant is contended
		release(t, ha)
		hb := <-ch
		if hb == nil {
			t.FailNow()
		}
		waitFor(t, 10*time.Second, "b's grant follows arrivals", hb.LearnListed)
		l0 := b.ReleaseListings()
		release(t, hb)
		if n := b.ReleaseListings() - l0; n != 0 {
			t.Errorf("the release listed the object %d times with nothing changed since the holder's own listing", n)
		}
		// the object is free: a new request takes it at once
		g, err := a.Acquire(context.Background(), "o", lock.Foreground, lock.AcquireOptions{Wait: 5 * time.Second})
		if err != nil {
			t.Fatalf("after the release: %v", err)
		}
		release(t, g)
	})

	t.Run("ping-pong", func(t *testing.T) {
		// Two engines take turns; each releases as soon as the other's
		// child exists (W4's timing).
		root := testRoot(t, zkServer)
		es := []*lock.Engine{newEngine(t, zkServer.Servers(), root, set), newEngine(t, zkServer.Servers(), root, set)}
		conn := rawConn(t, zkServer.Servers())
		const rounds = 30
		var chk overlapChecker
		held := acquire(t, es[0], "pp", lock.Foreground, lock.AcquireOptions{})
		chk.enter(held.Token())
		l0 := es[0].ReleaseListings() + es[1].ReleaseListings()
		for i := range rounds {
			ch := make(chan *lock.Grant, 1)
			go func() {
				g, err := es[(i+1)%2].Acquire(context.Background(), "pp", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
				if err != nil {
					t.Error(err)
				}
				ch <- g
			}()
			waitFor(t, 10*time.Second, "the other queued", func() bool { return len(children(t, conn, root, "pp")) == 3 })
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
		n := es[0].ReleaseListings() + es[1].ReleaseListings() - l0
		t.Logf("%d handoffs across sessions: %d releases listed before writing", rounds, n)
		if chk.overlaps != 0 || chk.badToken != 0 {
			t.Errorf("overlaps=%d non-increasing tokens=%d", chk.overlaps, chk.badToken)
		}
		// The arrival fires the holder's watch as its create commits, a
		// round trip before the test can see the child: the holder's
		// listing is answered or in flight when the release comes.
		if n > rounds/10 {
			t.Errorf("%d of %d releases listed the object themselves", n, rounds)
		}
	})
}
