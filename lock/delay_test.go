package lock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/testenv"
)

// Lock-delay (one of make chaos's): a holder whose session ends without a
// release (cut off from ZooKeeper until the server expires it) is followed
// by the next grant no earlier than the delay after the waiter saw
// privateLock gone; a waiter whose own wait is shorter fails with
// InstanceLockError; a request that turns the delay off (negative) is not
// delayed. The checker sees no overlap and increasing tokens.
func TestLockDelayBlackHoledHolder(t *testing.T) {
	t.Parallel()
	root := testRoot(t, zkServer)
	const delay = 2 * time.Second
	waiter := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.LockDelay = delay })
	conn := rawConn(t, zkServer.Servers())
	name, _ := lock.EscapeObject("LD1")
	plPath := root + "/" + name + "/privateLock"

	var chk overlapChecker
	for round, perRequest := range []time.Duration{0, -1} { // engine's delay, then turned off per request
		p := testenv.ProxyT(t, zkServer.Addr(1))
		holder := newEngine(t, []string{p.Addr()}, root)
		g1 := acquire(t, holder, "LD1", lock.Foreground, lock.AcquireOptions{})
		chk.enter(g1.Token())
		var wg sync.WaitGroup
		var g2 *lock.Grant
		var err2, errShort error
		if round == 0 {
			wg.Go(func() { // first in line; its wait ends inside its (long) delay
				_, errShort = waiter.Acquire(context.Background(), "LD1", lock.Foreground, lock.AcquireOptions{Wait: 8 * time.Second, LockDelay: lock.MaxLockDelay})
			})
			waitFor(t, 10*time.Second, "first waiter queued", func() bool { return len(children(t, conn, root, "LD1")) == 3 })
		}
		wg.Go(func() {
			g2, err2 = waiter.Acquire(context.Background(), "LD1", lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, LockDelay: perRequest})
		})
		waitFor(t, 10*time.Second, "waiters queued", func() bool { return len(children(t, conn, root, "LD1")) == 3+(1-round) })
		// The test's own watch sees privateLock go at about the moment the
		// waiter does.
		ok, _, ev, err := conn.ExistsW(plPath)
		if err != nil || !ok {
			t.Fatalf("privateLock: %v %v", ok, err)
		}
		before := waiter.Health().LockDelays
		p.BlackHole() // the holder's session ends on the server; it never releases
		<-g1.Done()   // the holder learns at its deadline, before the server expires it
		chk.leave()
		<-ev
		gone := time.Now()
		wg.Wait()
		if err2 != nil {
			t.Fatalf("round %d: waiter: %v", round, err2)
		}
		chk.enter(g2.Token())
		after := g2.AcquiredAt().Sub(gone)
		delays := waiter.Health().LockDelays - before
		t.Logf("round %d: granted %v after privateLock vanished; lock delays %d", round, after, delays)
		if round == 0 {
			// The waiter saw the absence no earlier than a few ms before
			// us (here later: when the first waiter gave up). Both
			// waited out the vanish.
			if after < delay-200*time.Millisecond || delays != 2 {
				t.Fatalf("granted %v after the vanish with lock delays %d; want ≥ %v and 2", after, delays, delay)
			}
			var ile *lock.InstanceLockError
			if !errors.As(errShort, &ile) {
				t.Fatalf("short wait during the delay: %v, want InstanceLockError", errShort)
			}
		} else if delays != 0 {
			t.Fatalf("lock_delay off for the request: %d lock delays, want 0", delays)
		}
		chk.leave()
		release(t, g2)
		p.Heal()
		holder.Close()
	}
	if chk.overlaps != 0 || chk.badToken != 0 {
		t.Fatalf("overlaps %d, bad tokens %d", chk.overlaps, chk.badToken)
	}
}

// A clean release is never delayed: engines with a long lock-delay hand the
// object over among themselves (releases, give-backs of the fast path,
// timeouts) and no grant goes through the delay path.
func TestLockDelayNotAfterRelease(t *testing.T) {
	root := testRoot(t, zkServer)
	var engines []*lock.Engine
	for range 3 {
		engines = append(engines, newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.LockDelay = lock.MaxLockDelay }))
	}
	var chk overlapChecker
	var wg sync.WaitGroup
	for i, e := range engines {
		wg.Go(func() {
			for n := range 30 {
				typ := lock.Type((i + n) % 2)
				g, err := e.Acquire(context.Background(), "LD2", typ, lock.AcquireOptions{Wait: 20 * time.Second})
				if err != nil {
					t.Errorf("engine %d: %v", i, err)
					return
				}
				chk.enter(g.Token())
				time.Sleep(time.Millisecond)
				chk.leave()
				if err := g.Release(context.Background()); err != nil {
					t.Errorf("release: %v", err)
					return
				}
			}
		})
	}
	// Requests that time out and leave, between the grants.
	wg.Go(func() {
		for range 20 {
			_, _ = engines[0].Acquire(context.Background(), "LD2", lock.Background, lock.AcquireOptions{Wait: 5 * time.Millisecond})
		}
	})
	wg.Wait()
	var delays int64
	for _, e := range engines {
		delays += e.Health().LockDelays
	}
	if delays != 0 || chk.overlaps != 0 || chk.badToken != 0 || chk.grants != 90 {
		t.Fatalf("lock delays %d, overlaps %d, bad tokens %d, grants %d; want 0/0/0/90", delays, chk.overlaps, chk.badToken, chk.grants)
	}
}

// The plugin's holders write no release record: a Baton waiter with a
// lock-delay treats the plugin's clean release like a vanish (the safe
// side), and the release record in the object node does not disturb the
// plugin's algorithm.
func TestLockDelayPluginHolder(t *testing.T) {
	root := testRoot(t, zkServer)
	const delay = 500 * time.Millisecond
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) {
		o.ObjectNode = lock.Persistent
		o.LockDelay = delay
	})
	objPath := root + "/LD3"
	for _, p := range []string{"/t", root} {
		if _, err := rawConn(t, zkServer.Servers()).Create(p, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			t.Fatal(err)
		}
	}
	conn := rawConn(t, zkServer.Servers())
	t.Cleanup(func() { _ = conn.Delete(objPath, -1) })
	// A Baton grant and release first: the object node carries its record.
	release(t, acquire(t, e, "LD3", lock.Foreground, lock.AcquireOptions{}))
	pl := &pluginLock{conn: rawConn(t, zkServer.Servers()), objPath: objPath}
	if _, err := pl.lock(context.Background(), "A"); err != nil {
		t.Fatal(err)
	}
	done := make(chan *lock.Grant)
	go func() { done <- acquire(t, e, "LD3", lock.Foreground, lock.AcquireOptions{}) }()
	waitFor(t, 10*time.Second, "queued", func() bool { return len(children(t, conn, root, "LD3")) == 3 })
	time.Sleep(100 * time.Millisecond) // let the waiter watch privateLock
	if err := pl.unlock(); err != nil {
		t.Fatal(err)
	}
	unlocked := time.Now()
	g := <-done
	if got := e.Health().LockDelays; got != 1 || g.AcquiredAt().Sub(unlocked) < delay-100*time.Millisecond {
		t.Fatalf("after the plugin's release: lock delays %d, granted after %v; want 1 and ≥ %v", got, g.AcquiredAt().Sub(unlocked), delay)
	}
	// And the plugin is granted after a Baton release as before.
	waiting := make(chan error, 1)
	pl2 := &pluginLock{conn: rawConn(t, zkServer.Servers()), objPath: objPath}
	go func() {
		_, err := pl2.lock(context.Background(), "B")
		waiting <- err
	}()
	waitFor(t, 10*time.Second, "plugin queued", func() bool { return len(children(t, conn, root, "LD3")) == 3 })
	release(t, g)
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
	if err := pl2.unlock(); err != nil {
		t.Fatal(err)
	}
}

// Abandon (a grant ended without its holder's release: a lease that
// expired, a holder process that exited) is a vanish for a waiter with a
// lock-delay; Release just before is not. Persistent object nodes: the
// last phase abandons with nobody waiting, and an empty container node
// reaped before the next acquire (testenv's reaper runs every 100 ms)
// takes the record with it — the documented limit TestReview2LockDelayAfterReap
// shows, which made this test fail under load.
func TestLockDelayAfterAbandon(t *testing.T) {
	root := testRoot(t, zkServer)
	const delay = 700 * time.Millisecond
	persistent := func(o *lock.Options) { o.ObjectNode = lock.Persistent }
	holder := newEngine(t, zkServer.Servers(), root, persistent)
	waiter := newEngine(t, zkServer.Servers(), root, persistent, func(o *lock.Options) { o.LockDelay = delay })
	conn := rawConn(t, zkServer.Servers())
	for _, abandon := range []bool{false, true} {
		g := acquire(t, holder, "LD4", lock.Foreground, lock.AcquireOptions{})
		done := make(chan *lock.Grant)
		go func() { done <- acquire(t, waiter, "LD4", lock.Foreground, lock.AcquireOptions{}) }()
		waitFor(t, 10*time.Second, "queued", func() bool { return len(children(t, conn, root, "LD4")) == 3 })
		before := waiter.Health().LockDelays
		end := g.Release
		if abandon {
			end = g.Abandon
		}
		if err := end(context.Background()); err != nil {
			t.Fatal(err)
		}
		ended := time.Now()
		g2 := <-done
		n, after := waiter.Health().LockDelays-before, g2.AcquiredAt().Sub(ended)
		t.Logf("abandon %v: granted %v later, %d lock delays", abandon, after, n)
		if abandon && (n != 1 || after < delay-100*time.Millisecond) || !abandon && n != 0 { // the waiter may see the delete a little before Abandon returns
			t.Fatalf("abandon %v: %d lock delays, granted %v later; want %d", abandon, n, after, map[bool]int{false: 0, true: 1}[abandon])
		}
		release(t, g2)
	}
	// Alone on the object, the waiter's engine has a fast-path prediction
	// from its own release; after an Abandon it has none: its next acquire
	// looks at how the grant ended and waits out the delay.
	release(t, acquire(t, waiter, "LD4", lock.Foreground, lock.AcquireOptions{}))
	g := acquire(t, waiter, "LD4", lock.Foreground, lock.AcquireOptions{})
	before := waiter.Health().LockDelays
	if err := g.Abandon(context.Background()); err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	g = acquire(t, waiter, "LD4", lock.Foreground, lock.AcquireOptions{})
	if n, after := waiter.Health().LockDelays-before, g.AcquiredAt().Sub(ended); n != 1 || after < delay {
		t.Fatalf("own acquire after its Abandon: %d lock delays, granted %v later; want 1 and ≥ %v", n, after, delay)
	}
	release(t, g)
}
