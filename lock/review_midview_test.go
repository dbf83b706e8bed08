package lock_test

// Review of cdd2d7d (mreview): a native waiter whose view shows a holder
// named in the data with its child gone (localRelease, one read of the
// data) and every request entering the slow path counting as contended.

import (
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
