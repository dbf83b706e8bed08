package lock_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/testenv"
)

// TestQueueingBurstListsOneAtATime: a burst of waiters queueing on one
// object of one engine shares listings: a listing answered after a
// waiter's create serves it, and one sent too early for a newer waiter is
// followed by one more (joined by every waiter arriving meanwhile), not by
// one per waiter. Each getChildren answer carries the whole queue, so a
// listing per waiter would cost O(n²) bytes and CPU (10,000 waiters on one
// sidecar: 300 KB each).
func TestQueueingBurstListsOneAtATime(t *testing.T) {
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{})
	root := testRoot(t, z)
	e := newEngine(t, z.Servers(), root)
	conn := rawConn(t, z.Servers())
	const n = 300
	obj := "burst"
	h := acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
	before := e.Listings()
	var check overlapChecker
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			g, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
			if err != nil {
				t.Error(err)
				return
			}
			check.enter(g.Token())
			check.leave()
			release(t, g)
		})
	}
	close(start)
	waitFor(t, 60*time.Second, "all queued", func() bool { return len(children(t, conn, root, obj)) == n+2 })
	// every waiter has its node; wait until each has listed (the engine's
	// waiting count is the acquires past their create)
	waitFor(t, 60*time.Second, "every waiter watching", func() bool {
		m, err := z.Mntr(1)
		w, _ := strconv.Atoi(m["zk_watch_count"])
		return err == nil && w >= n
	})
	listed := e.Listings() - before
	t.Logf("%d waiters queued in one burst: %d listings", n, listed)
	release(t, h)
	wg.Wait()
	if check.overlaps != 0 || check.badToken != 0 {
		t.Errorf("overlaps %d, non-increasing tokens %d", check.overlaps, check.badToken)
	}
	// One in flight at a time: a listing round per getChildren round trip
	// of the burst, far fewer than one per waiter.
	if listed > n/5 {
		t.Errorf("%d waiters queued in one burst sent %d listings: listings are not shared", n, listed)
	}
}
