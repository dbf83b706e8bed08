package lock_test

// Review of cdd2d7d (mreview): a native waiter whose view shows a holder
// named in the data with its child gone (localRelease, one read of the
// data) and every request entering the slow path counting as contended.

import (
	"context"
	"path"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
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
