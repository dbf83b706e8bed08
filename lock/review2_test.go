package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
)

// Review2 (issue 22 §4): a holder that vanishes (Abandon: a lease that
// expired while its holder process may still be working; or its engine
// closed with the grant held) when nobody waits leaves its object node
// empty, and the container reaper deletes it (in production within
// znode.container.checkIntervalMs, 60 s by default; here 100 ms). The
// release record lives in that node, so the next request — with a
// lock-delay, arriving well inside the delay — finds a new incarnation
// (data version 0: "no Baton grant on this object node") and is granted at
// once: the vanish is not delayed. FAILS: lastHolderVanished cannot tell a
// reaped node's vanish from an object never used.
func TestReview2LockDelayAfterReap(t *testing.T) {
	root := testRoot(t, zkServer)
	const delay = 5 * time.Second
	conn := rawConn(t, zkServer.Servers())
	waiter := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.LockDelay = delay })
	for _, how := range []string{"abandon", "close"} {
		obj := "R2-reap-" + how
		name, _ := lock.EscapeObject(obj)
		holder := newEngine(t, zkServer.Servers(), root)
		g := acquire(t, holder, obj, lock.Foreground, lock.AcquireOptions{})
		if how == "abandon" {
			if err := g.Abandon(context.Background()); err != nil {
				t.Fatal(err)
			}
		} else {
			holder.Close()
		}
		vanished := time.Now()
		waitFor(t, 20*time.Second, "object node reaped", func() bool {
			ok, _, err := conn.Exists(root + "/" + name)
			return err == nil && !ok
		})
		before := waiter.Health().LockDelays
		g2 := acquire(t, waiter, obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
		n, after := waiter.Health().LockDelays-before, g2.AcquiredAt().Sub(vanished)
		release(t, g2)
		t.Logf("%s: granted %v after the vanish, %d lock delays", how, after, n)
		if n != 1 || after < delay {
			t.Errorf("%s, object node reaped: the next request with a %v lock-delay was granted %v after the holder vanished (%d lock delays); want the vanish waited out", how, delay, after, n)
		}
	}
}
