package lock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
)

// Issue 21 §1 on the plugin protocol: a local handoff in one write. The
// release multi of a holder whose engine has a foreground waiter known to
// be first after it creates that waiter's privateLock, and the waiter is
// woken in process (handoff.go).

// packets returns the packets the server received from the given sessions
// (not mntr's total: an earlier test's session left to expire pings too).
func packets(t *testing.T, sessions ...int64) int64 {
	t.Helper()
	v, err := zkServer.Received(1, sessions...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// watches returns the server's zk_watch_count.
func watches(t *testing.T) int64 {
	t.Helper()
	m, err := zkServer.Mntr(1)
	if err != nil {
		t.Fatal(err)
	}
	var v int64
	fmt.Sscan(m["zk_watch_count"], &v)
	return v
}

// Two requests of one engine ping-pong on an object: every handoff is in
// process and costs the ZooKeeper packets of one write (the holder's
// release multi), where it cost two (the release, then the successor's
// privateLock multi). Counted from the server's packets around each
// handoff only (the waiter's own queueing — create, list, watch — happens
// before the window). Another engine (another sidecar) sees each grant as
// the current one by its token (Check) and names its node (Inspect).
func TestPluginLocalPingPong(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
	other := newEngine(t, zkServer.Servers(), root)
	ctx := context.Background()
	const rounds = 20
	held := acquire(t, e, "pp", lock.Foreground, lock.AcquireOptions{})
	var chk overlapChecker
	chk.enter(held.Token())
	sessions := []int64{e.Health().SessionID, other.Health().SessionID}
	var pk int64
	var window time.Duration
	l0 := e.LocalHandoffs()
	for i := range rounds {
		w0 := watches(t)
		ch := make(chan *lock.Grant, 1)
		go func() {
			g, err := e.Acquire(ctx, "pp", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
			if err != nil {
				t.Error(err)
			}
			ch <- g
		}()
		// the waiter listed, offered itself and watches the holder's node: counted, not slept
		waitFor(t, 10*time.Second, "the waiter offered a handoff", func() bool { return e.HandoffOffers("pp") == 1 })
		waitFor(t, 10*time.Second, "the waiter watching", func() bool { return watches(t) > w0 })
		s0, t0 := e.Health().Syncs+other.Health().Syncs, time.Now()
		p0 := packets(t, sessions...)
		chk.leave()
		release(t, held)
		held = <-ch
		if held == nil {
			t.FailNow()
		}
		p1 := packets(t, sessions...)
		window += time.Since(t0)
		pk += p1 - p0 - (e.Health().Syncs + other.Health().Syncs - s0)
		chk.enter(held.Token())
		if cur, tok, err := other.Check(ctx, "pp", held.Token()); err != nil || !cur || tok != held.Token() {
			t.Fatalf("round %d: another engine's Check(%d) = %v, %d, %v; want current", i, held.Token(), cur, tok, err)
		}
		st, err := other.Inspect(ctx, "pp")
		if err != nil || st.Holder == nil || st.Holder.Name != held.Node() || st.Holder.Token != held.Token() || !st.Holder.Known {
			t.Fatalf("round %d: another engine's Inspect = %+v, %v; want holder %s token %d", i, st, err, held.Node(), held.Token())
		}
	}
	chk.leave()
	release(t, held)
	local := e.LocalHandoffs() - l0
	// go-zookeeper pings an idle connection every third of the session
	// timeout: up to that many per session (2 engines) in the windows
	pings := 2 * (1 + int64(window/(e.Health().Timeout/3)))
	t.Logf("%d handoffs: %d in process, %.2f packets per handoff (%d in all, keeper syncs excluded, up to %d pings)",
		rounds, local, float64(pk)/rounds, pk, pings)
	if chk.overlaps != 0 || chk.badToken != 0 {
		t.Errorf("overlaps=%d non-increasing tokens=%d", chk.overlaps, chk.badToken)
	}
	if local != rounds {
		t.Errorf("%d of %d handoffs in process", local, rounds)
	}
	if pk > rounds+pings {
		t.Errorf("%d packets for %d handoffs: more than one write per handoff (allowed %d with pings)", pk, rounds, rounds+pings)
	}
}

// A foreign participant queued between the holder and a local waiter is
// never passed over: the local waiter watches the foreign node, not the
// holder, so the release is the ordinary one, the foreign participant is
// granted next, and the local waiter after it. Foreign: the original
// plugin's algorithm (ZkBlockingWriteLock) on a raw connection, or Baton on
// another sidecar.
func TestPluginLocalHandoffNotPastForeign(t *testing.T) {
	for _, kind := range []string{"plugin", "baton"} {
		t.Run(kind, func(t *testing.T) {
			root := testRoot(t, zkServer)
			persistent := func(o *lock.Options) { o.ObjectNode = lock.Persistent }
			e1 := newEngine(t, zkServer.Servers(), root, persistent)
			e2 := newEngine(t, zkServer.Servers(), root, persistent)
			conn := rawConn(t, zkServer.Servers())
			t.Cleanup(func() { _ = conn.Delete(root+"/MQ", -1) })
			ctx := context.Background()
			h := acquire(t, e1, "MQ", lock.Foreground, lock.AcquireOptions{})
			var chk overlapChecker
			chk.enter(h.Token())
			order := make(chan string, 2)
			var wg sync.WaitGroup
			wg.Go(func() {
				if kind == "plugin" {
					p := &pluginLock{conn: rawConn(t, zkServer.Servers()), objPath: root + "/MQ"}
					tok, err := p.lock(ctx, "A")
					if err != nil {
						t.Errorf("plugin: %v", err)
						return
					}
					order <- "foreign"
					chk.enter(tok)
					time.Sleep(20 * time.Millisecond)
					chk.leave()
					if err := p.unlock(); err != nil {
						t.Errorf("plugin unlock: %v", err)
					}
					return
				}
				g, err := e2.Acquire(ctx, "MQ", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
				if err != nil {
					t.Errorf("foreign engine: %v", err)
					return
				}
				order <- "foreign"
				chk.enter(g.Token())
				time.Sleep(20 * time.Millisecond)
				chk.leave()
				release(t, g)
			})
			waitFor(t, 10*time.Second, "foreign queued", func() bool { return len(children(t, conn, root, "MQ")) == 3 })
			wg.Go(func() {
				g, err := e1.Acquire(ctx, "MQ", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
				if err != nil {
					t.Errorf("local waiter: %v", err)
					return
				}
				order <- "local"
				chk.enter(g.Token())
				chk.leave()
				release(t, g)
			})
			waitFor(t, 10*time.Second, "local queued", func() bool { return len(children(t, conn, root, "MQ")) == 4 })
			time.Sleep(50 * time.Millisecond) // watching (the order must hold either way)
			l0 := e1.LocalHandoffs()
			chk.leave()
			release(t, h)
			wg.Wait()
			if a, b := <-order, <-order; a != "foreign" || b != "local" {
				t.Errorf("order %s, %s; want the foreign participant first", a, b)
			}
			if n := e1.LocalHandoffs() - l0; n != 0 {
				t.Errorf("%d local handoffs past a foreign participant", n)
			}
			if chk.overlaps != 0 || chk.badToken != 0 {
				t.Errorf("overlaps=%d non-increasing tokens=%d", chk.overlaps, chk.badToken)
			}
		})
	}
}

// A background waiter of the holder's engine is not granted in the release
// multi: a foreground request arriving later (another engine's) sorts
// ahead of it, unseen by the holder's engine, and is granted first.
func TestPluginLocalHandoffNotToBackground(t *testing.T) {
	root := testRoot(t, zkServer)
	e1 := newEngine(t, zkServer.Servers(), root)
	e2 := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())
	h := acquire(t, e1, "BG", lock.Foreground, lock.AcquireOptions{})
	var chk overlapChecker
	chk.enter(h.Token())
	order := make(chan string, 2)
	var wg sync.WaitGroup
	take := func(e *lock.Engine, typ lock.Type, who string) { holdInOrder(t, e, "BG", typ, who, &chk, order) }
	wg.Go(func() { take(e1, lock.Background, "local-background") })
	waitFor(t, 10*time.Second, "background queued", func() bool { return len(children(t, conn, root, "BG")) == 3 })
	wg.Go(func() { take(e2, lock.Foreground, "foreign-foreground") })
	waitFor(t, 10*time.Second, "foreground queued", func() bool { return len(children(t, conn, root, "BG")) == 4 })
	time.Sleep(50 * time.Millisecond) // both watching (the order must hold either way)
	if n := e1.HandoffOffers("BG"); n != 0 {
		t.Errorf("%d handoff offers from a background waiter", n)
	}
	l0 := e1.LocalHandoffs()
	chk.leave()
	release(t, h)
	wg.Wait()
	if a, b := <-order, <-order; a != "foreign-foreground" || b != "local-background" {
		t.Errorf("order %s, %s; want the later foreground request first", a, b)
	}
	if n := e1.LocalHandoffs() - l0; n != 0 {
		t.Errorf("%d local handoffs to a background waiter", n)
	}
	if chk.overlaps != 0 || chk.badToken != 0 {
		t.Errorf("overlaps=%d non-increasing tokens=%d", chk.overlaps, chk.badToken)
	}
}

// A signal written to the holder's privateLock (unseen by the holder: its
// watch is not armed) makes the handoff multi apply nothing (privateLock
// is deleted at the version the grant created); the ordinary release
// follows and the waiter is granted the ordinary way.
func TestPluginLocalHandoffNotPastSignal(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
	other := newEngine(t, zkServer.Servers(), root)
	ctx := context.Background()
	h := acquire(t, e, "SG", lock.Foreground, lock.AcquireOptions{})
	ch := make(chan *lock.Grant, 1)
	go func() {
		g, err := e.Acquire(ctx, "SG", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		ch <- g
	}()
	waitFor(t, 10*time.Second, "the waiter offered a handoff", func() bool { return e.HandoffOffers("SG") == 1 })
	if _, err := other.Signal(ctx, "SG", h.Token(), lock.Signal{Kind: "revoke", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	l0 := e.LocalHandoffs()
	release(t, h)
	g := <-ch
	if g == nil {
		t.FailNow()
	}
	defer release(t, g)
	if n := e.LocalHandoffs() - l0; n != 0 {
		t.Errorf("%d local handoffs over a signal the holder had not seen", n)
	}
	if g.Token() <= h.Token() {
		t.Errorf("token %d not above %d", g.Token(), h.Token())
	}
	if _, ok := g.LastSignal(); ok {
		t.Errorf("the new grant carries the old holder's signal")
	}
}

// A successor that gives up while the handoff multi is in flight: before
// the multi is sent (its child is gone: the multi applies nothing and the
// release is the ordinary one) or after it was applied (the privateLock
// created for it is never reported and is given back). Either way the
// object is free afterwards and nothing is left behind.
func TestPluginLocalSuccessorCancelled(t *testing.T) {
	for _, stage := range []string{"send", "answer"} {
		t.Run(stage, func(t *testing.T) {
			root := testRoot(t, zkServer)
			e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
			other := newEngine(t, zkServer.Servers(), root)
			conn := rawConn(t, zkServer.Servers())
			h := acquire(t, e, "SC", lock.Foreground, lock.AcquireOptions{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := make(chan error, 1)
			go func() {
				g, err := e.Acquire(ctx, "SC", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
				if err == nil {
					release(t, g)
				}
				out <- err
			}()
			waitFor(t, 10*time.Second, "the waiter offered a handoff", func() bool { return e.HandoffOffers("SC") == 1 })
			var once sync.Once
			var werr error
			restore := lock.SetHandoffHook(func(s string) {
				if s == stage {
					once.Do(func() { cancel(); werr = <-out })
				}
			})
			defer restore()
			l0 := e.LocalHandoffs()
			release(t, h)
			restore()
			var ile *lock.InstanceLockError
			if !errors.As(werr, &ile) {
				t.Fatalf("cancelled waiter: %v, want an InstanceLockError", werr)
			}
			if n := e.LocalHandoffs() - l0; n != 0 {
				t.Errorf("%d handoffs counted to a waiter that gave up", n)
			}
			// The object is free: another engine takes it at once, once
			// the give-back (if any) is done.
			var g *lock.Grant
			waitFor(t, 10*time.Second, "object free", func() bool {
				var err error
				g, err = other.Acquire(context.Background(), "SC", lock.Foreground, lock.AcquireOptions{TryOnce: true})
				return err == nil
			})
			if g.Token() <= h.Token() {
				t.Errorf("token %d not above %d", g.Token(), h.Token())
			}
			release(t, g)
			waitFor(t, 10*time.Second, "nothing left", func() bool { return len(children(t, conn, root, "SC")) == 0 })
		})
	}
}

// Three engines (sessions) and the original plugin's algorithm contend for
// two objects, foreground and background mixed, with waits cut short at
// random moments (cancels racing the handoffs): never two holders, tokens
// strictly increase, nothing left behind, and local handoffs happened.
func TestPluginLocalStress(t *testing.T) {
	root := testRoot(t, zkServer)
	persistent := func(o *lock.Options) { o.ObjectNode = lock.Persistent; o.HolderWatchDelay = 5 * time.Millisecond }
	es := make([]*lock.Engine, 3)
	for i := range es {
		es[i] = newEngine(t, zkServer.Servers(), root, persistent)
	}
	conn := rawConn(t, zkServer.Servers())
	for _, p := range []string{"/t", root} { // the plugin expects its root to exist
		if _, err := conn.Create(p, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			t.Fatal(err)
		}
	}
	objs := []string{"S0", "S1"}
	t.Cleanup(func() {
		for _, o := range objs {
			_ = conn.Delete(root+"/"+o, -1)
		}
	})
	chk := map[string]*overlapChecker{"S0": {}, "S1": {}}
	var cancelled, granted atomic.Int64
	var wg sync.WaitGroup
	for i := range 9 {
		e := es[i%3]
		wg.Go(func() {
			for j := range 25 {
				obj := objs[(i+j)%2]
				typ := lock.Foreground
				if (i+j)%5 == 0 {
					typ = lock.Background
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(40)+1)*time.Millisecond)
				if j%3 != 0 {
					cancel()
					ctx, cancel = context.WithCancel(context.Background())
				}
				g, err := e.Acquire(ctx, obj, typ, lock.AcquireOptions{Wait: 30 * time.Second})
				cancel()
				if err != nil {
					var ile *lock.InstanceLockError
					if !errors.As(err, &ile) {
						t.Errorf("acquire: %v", err)
					}
					cancelled.Add(1)
					continue
				}
				granted.Add(1)
				chk[obj].enter(g.Token())
				time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
				chk[obj].leave()
				if err := g.Release(context.Background()); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		})
	}
	wg.Go(func() { // the original plugin's algorithm beside them
		for j := range 10 {
			p := &pluginLock{conn: rawConn(t, zkServer.Servers()), objPath: root + "/" + objs[j%2]}
			tok, err := p.lock(context.Background(), "A")
			if err != nil {
				t.Errorf("plugin: %v", err)
				return
			}
			chk[objs[j%2]].enter(tok)
			time.Sleep(time.Millisecond)
			chk[objs[j%2]].leave()
			if err := p.unlock(); err != nil {
				t.Errorf("plugin unlock: %v", err)
			}
		}
	})
	wg.Wait()
	var local int64
	for _, e := range es {
		local += e.LocalHandoffs()
	}
	t.Logf("granted %d, gave up %d, local handoffs %d", granted.Load(), cancelled.Load(), local)
	for o, c := range chk {
		if c.overlaps != 0 || c.badToken != 0 {
			t.Errorf("%s: overlaps=%d non-increasing tokens=%d", o, c.overlaps, c.badToken)
		}
	}
	if local == 0 {
		t.Errorf("no local handoff happened: the stress did not exercise the path")
	}
}

// The handoff multi is applied but its reply is lost (the connection cut
// right after it was written): the successor, told the outcome is
// unknown, gives back after the reconnect whatever privateLock of its own
// it finds and queues on; it is granted (never two holders), the holder's
// release completes, and nothing is left behind.
func TestPluginLocalHandoffReplyLost(t *testing.T) {
	root := testRoot(t, zkServer)
	d := newCutDialer()
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.Dialer = d.dial; o.HolderWatchDelay = time.Minute })
	other := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())
	h := acquire(t, e, "RL", lock.Foreground, lock.AcquireOptions{})
	var chk overlapChecker
	chk.enter(h.Token())
	ch := make(chan *lock.Grant, 1)
	go func() {
		g, err := e.Acquire(context.Background(), "RL", lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		ch <- g
	}()
	waitFor(t, 10*time.Second, "the waiter offered a handoff", func() bool { return e.HandoffOffers("RL") == 1 })
	cut := d.arm(opMulti, 300*time.Millisecond)
	chk.leave()
	if err := h.Release(context.Background()); err != nil {
		t.Fatalf("release: %v", err)
	}
	<-cut
	// Meanwhile another engine must not be granted beside whoever holds.
	if g, err := other.Acquire(context.Background(), "RL", lock.Foreground, lock.AcquireOptions{TryOnce: true}); err == nil {
		chk.enter(g.Token())
		chk.leave()
		release(t, g)
	}
	g := <-ch
	if g == nil {
		t.FailNow()
	}
	chk.enter(g.Token())
	if cur, _, err := other.Check(context.Background(), "RL", g.Token()); err != nil || !cur {
		t.Errorf("the successor's grant is not current for another engine: %v, %v", cur, err)
	}
	chk.leave()
	release(t, g)
	if chk.overlaps != 0 || chk.badToken != 0 {
		t.Errorf("overlaps=%d non-increasing tokens=%d", chk.overlaps, chk.badToken)
	}
	waitFor(t, 10*time.Second, "nothing left", func() bool { return len(children(t, conn, root, "RL")) == 0 })
}

// The waiter offers itself before its watch on the holder's node is set:
// a holder releasing in between hands over all the same, and the watch,
// set after the multi, finds the node gone (NoNode): the waiter takes the
// handoff's answer, with no listing.
func TestPluginLocalHandoffBeforeWatch(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
	h := acquire(t, e, "BW", lock.Foreground, lock.AcquireOptions{})
	offered, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	restore := lock.SetHandoffHook(func(s string) {
		if s == "offered" {
			once.Do(func() { close(offered); <-resume })
		}
	})
	defer restore()
	ch := make(chan *lock.Grant, 1)
	go func() {
		g, err := e.Acquire(context.Background(), "BW", lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		ch <- g
	}()
	<-offered
	l0, lists := e.LocalHandoffs(), e.Listings()
	release(t, h) // the waiter has not set its watch yet
	close(resume)
	g := <-ch
	if g == nil {
		t.FailNow()
	}
	if n := e.LocalHandoffs() - l0; n != 1 {
		t.Errorf("%d local handoffs, want 1", n)
	}
	if n := e.Listings() - lists; n != 0 {
		t.Errorf("%d listings after the handoff, want 0", n)
	}
	if g.Token() <= h.Token() {
		t.Errorf("token %d not above %d", g.Token(), h.Token())
	}
	release(t, g)
}

// holdInOrder acquires obj on e (a minute's wait), sends who to order once
// granted, holds it 10 ms under chk and releases it.
func holdInOrder(t *testing.T, e *lock.Engine, obj string, typ lock.Type, who string, chk *overlapChecker, order chan<- string) {
	g, err := e.Acquire(context.Background(), obj, typ, lock.AcquireOptions{Wait: time.Minute})
	if err != nil {
		t.Errorf("%s: %v", who, err)
		return
	}
	order <- who
	chk.enter(g.Token())
	time.Sleep(10 * time.Millisecond)
	chk.leave()
	release(t, g)
}
