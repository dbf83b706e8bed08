package lock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"path"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
)

// Plugin protocol local handoffs under random cuts (review of issue 21 §1):
// two engines behind random cutters (any request about the object, the
// handoff multi included, may lose its reply), five waiters each (so that
// holders hand over locally), foreground and background mixed, some waits
// cut short, some grants abandoned; a clean engine checks every grant's
// token while it is held (fencing: what another sidecar reports current);
// the original plugin's algorithm contends beside them. Never two holders,
// tokens increase, no grant lost while its session lives, no release
// error, nothing left, the object free at the end.
func TestReviewPlocalFuzzCuts(t *testing.T) {
	if testing.Short() {
		t.Skip("random cuts")
	}
	t.Parallel()
	root := testRoot(t, zkServer)
	const obj = "PF"
	objPath := path.Join(root, obj)
	persistent := func(o *lock.Options) { o.ObjectNode = lock.Persistent; o.HolderWatchDelay = 2 * time.Millisecond }
	cutters := []*randCutter{{rng: rand.New(rand.NewSource(21))}, {rng: rand.New(rand.NewSource(22))}}
	var engines []*lock.Engine
	for _, c := range cutters {
		engines = append(engines, newEngine(t, zkServer.Servers(), root, persistent, func(o *lock.Options) {
			o.Dialer = c.dial
			o.SessionTimeout = 6 * time.Second
		}))
	}
	clean := newEngine(t, zkServer.Servers(), root, persistent)
	conn := rawConn(t, zkServer.Servers())
	for _, p := range []string{"/t", root} {
		if _, err := conn.Create(p, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = conn.Delete(objPath, -1) })
	release(t, acquire(t, clean, obj, lock.Foreground, lock.AcquireOptions{}))
	for _, c := range cutters {
		c.set(objPath, 0.02)
	}
	var chk overlapChecker
	var mu sync.Mutex
	var violations []string
	violate := func(f string, a ...any) {
		mu.Lock()
		violations = append(violations, fmt.Sprintf(f, a...))
		mu.Unlock()
	}
	var granted, ended, failed atomic.Int64
	var wg sync.WaitGroup
	for i, e := range engines {
		for w := range 5 {
			wg.Go(func() {
				rng := rand.New(rand.NewSource(int64(1000*i + w)))
				for c := range 12 {
					typ := lock.Foreground
					if rng.Intn(5) == 0 {
						typ = lock.Background
					}
					wait := time.Minute
					short := rng.Intn(4) == 0
					if short {
						wait = time.Duration(1+rng.Intn(20)) * time.Millisecond
					}
					g, err := e.Acquire(context.Background(), obj, typ, lock.AcquireOptions{Wait: wait})
					if err != nil {
						if short {
							ended.Add(1)
						} else {
							failed.Add(1)
							t.Logf("engine %d round %d: %v", i, c, err)
						}
						continue
					}
					granted.Add(1)
					chk.enter(g.Token())
					if rng.Intn(3) == 0 {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						cur, tok, err := clean.Check(ctx, obj, g.Token())
						cancel()
						if err == nil && !cur && g.Err() == nil {
							violate("engine %d: grant %d not current for another engine (current token %d)", i, g.Token(), tok)
						}
					} else {
						time.Sleep(time.Duration(rng.Intn(3)) * time.Millisecond)
					}
					chk.leave()
					if err := g.Err(); err != nil {
						violate("engine %d: grant %d lost while held: %v", i, g.Token(), err)
					}
					end := g.Release
					if rng.Intn(6) == 0 {
						end = g.Abandon
					}
					if err := end(context.Background()); err != nil && g.Err() == nil {
						violate("engine %d: release of %d: %v", i, g.Token(), err)
					}
				}
			})
		}
	}
	stop := make(chan struct{})
	var pwg sync.WaitGroup
	pwg.Go(func() { // the original plugin's algorithm
		pl := &pluginLock{conn: rawConn(t, zkServer.Servers()), objPath: objPath}
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			tok, err := pl.lock(ctx, "A")
			cancel()
			if err != nil {
				t.Errorf("plugin lock: %v", err)
				return
			}
			chk.enter(tok)
			time.Sleep(2 * time.Millisecond)
			chk.leave()
			if err := pl.unlock(); err != nil {
				t.Errorf("plugin unlock: %v", err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	wg.Wait()
	close(stop)
	pwg.Wait()
	cuts := 0
	for _, c := range cutters {
		c.set("", 0)
		cuts += c.count()
	}
	var local int64
	for _, e := range engines {
		local += e.LocalHandoffs()
	}
	t.Logf("granted %d, short waits ended %d, failed %d, cuts %d, local handoffs %d", granted.Load(), ended.Load(), failed.Load(), cuts, local)
	if chk.overlaps != 0 || chk.badToken != 0 {
		t.Errorf("overlaps %d, non-increasing tokens %d", chk.overlaps, chk.badToken)
	}
	for _, v := range violations {
		t.Error(v)
	}
	if failed.Load() > 0 {
		t.Errorf("%d acquires with a long wait failed", failed.Load())
	}
	// Local handoffs are few here (the successor is mostly on another
	// engine): TestReviewPlocalOneEngineCancels asserts the path is taken.
	waitFor(t, 20*time.Second, "nothing left", func() bool { return len(children(t, conn, root, obj)) == 0 })
	g, err := clean.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{TryOnce: true})
	if err != nil {
		t.Fatalf("object not free at the end: %v", err)
	}
	release(t, g)
}

// After a local handoff, another engine sees the successor as the holder:
// Inspect names its request and token, Check finds its token current and
// the old holder's not (fencing across sidecars).
func TestReviewPlocalFencingSeenElsewhere(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
	other := newEngine(t, zkServer.Servers(), root)
	h := acquire(t, e, "FS", lock.Foreground, lock.AcquireOptions{})
	ch := make(chan *lock.Grant, 1)
	go func() {
		g, err := e.Acquire(context.Background(), "FS", lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second, RequestID: "succ-1"})
		if err != nil {
			t.Error(err)
		}
		ch <- g
	}()
	waitFor(t, 10*time.Second, "the waiter offered a handoff", func() bool { return e.HandoffOffers("FS") == 1 })
	l0 := e.LocalHandoffs()
	release(t, h)
	g := <-ch
	if g == nil {
		t.FailNow()
	}
	defer release(t, g)
	if e.LocalHandoffs()-l0 != 1 {
		t.Fatalf("no local handoff (%d): the test did not exercise the path", e.LocalHandoffs()-l0)
	}
	if g.Token() <= h.Token() {
		t.Errorf("successor token %d not above %d", g.Token(), h.Token())
	}
	st, err := other.Inspect(context.Background(), "FS")
	if err != nil {
		t.Fatal(err)
	}
	if st.Holder == nil || st.Holder.Token != g.Token() || st.Holder.RequestID != g.RequestID() || st.Holder.Name != g.Node() {
		t.Errorf("another engine's Inspect: holder %+v, want token %d request %s node %s", st.Holder, g.Token(), g.RequestID(), g.Node())
	}
	if len(st.Waiters) != 0 {
		t.Errorf("waiters left: %+v", st.Waiters)
	}
	if cur, tok, err := other.Check(context.Background(), "FS", g.Token()); err != nil || !cur || tok != g.Token() {
		t.Errorf("Check(successor) = %v, %d, %v", cur, tok, err)
	}
	if cur, _, err := other.Check(context.Background(), "FS", h.Token()); err != nil || cur {
		t.Errorf("Check(old holder) = %v, %v: the released token is still current", cur, err)
	}
}

// The handoff multi's reply is lost and the session expires before the
// engine reconnects: the waiter is not reported granted (its session is
// gone), the holder's release does not report an error for a multi that
// may have applied, and another engine is granted once the session's
// nodes are gone, with a token above both.
func TestReviewPlocalHandoffReplyLostSessionExpires(t *testing.T) {
	t.Parallel()
	root := testRoot(t, zkServer)
	d := newCutDialer()
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) {
		o.Dialer = d.dial
		o.HolderWatchDelay = time.Minute
		o.SessionTimeout = 2 * time.Second
	})
	other := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())
	h := acquire(t, e, "RX", lock.Foreground, lock.AcquireOptions{})
	type res struct {
		g   *lock.Grant
		err error
	}
	ch := make(chan res, 1)
	go func() {
		g, err := e.Acquire(context.Background(), "RX", lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
		ch <- res{g, err}
	}()
	waitFor(t, 10*time.Second, "the waiter offered a handoff", func() bool { return e.HandoffOffers("RX") == 1 })
	cut := d.arm(opMulti, 8*time.Second) // well past the session timeout
	if err := h.Release(context.Background()); err != nil {
		t.Errorf("release: %v", err)
	}
	<-cut
	var chk overlapChecker
	r := <-ch
	if r.err == nil {
		// a grant in a session that expired is never reported held
		t.Errorf("the waiter was granted (token %d, state %v) in an expired session", r.g.Token(), r.g.State())
		chk.enter(r.g.Token())
	}
	g, err := other.Acquire(context.Background(), "RX", lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
	if err != nil {
		t.Fatalf("another engine: %v", err)
	}
	chk.enter(g.Token())
	if g.Token() <= h.Token() {
		t.Errorf("token %d not above the old holder's %d", g.Token(), h.Token())
	}
	chk.leave()
	release(t, g)
	if chk.overlaps != 0 {
		t.Errorf("overlaps %d", chk.overlaps)
	}
	d.heal()
	waitFor(t, 20*time.Second, "nothing left", func() bool { return len(children(t, conn, root, "RX")) == 0 })
}

// Lock-delay waiters on another engine after a local handoff: the
// successor's clean release, or the give-back of a grant its waiter gave up
// as the multi was answered, is no vanish (no delay waited out); its
// Abandon is one (the delay is waited out once).
func TestReviewPlocalLockDelayAfterLocalHandoff(t *testing.T) {
	for _, end := range []string{"release", "abandon", "gave-up"} {
		t.Run(end, func(t *testing.T) {
			root := testRoot(t, zkServer)
			e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
			delay := lock.MaxLockDelay
			if end == "abandon" {
				delay = 500 * time.Millisecond
			}
			waiter := newEngine(t, zkServer.Servers(), root)
			conn := rawConn(t, zkServer.Servers())
			h := acquire(t, e, "LD", lock.Foreground, lock.AcquireOptions{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			succ := make(chan error, 1)
			granted := make(chan *lock.Grant, 1)
			go func() {
				g, err := e.Acquire(ctx, "LD", lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
				if err == nil {
					granted <- g
				}
				succ <- err
			}()
			waitFor(t, 10*time.Second, "the successor offered a handoff", func() bool { return e.HandoffOffers("LD") == 1 })
			w := make(chan error, 1)
			before := waiter.Health().LockDelays
			go func() {
				g, err := waiter.Acquire(context.Background(), "LD", lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second, LockDelay: delay})
				if err == nil {
					release(t, g)
				}
				w <- err
			}()
			waitFor(t, 10*time.Second, "the lock-delay waiter queued", func() bool { return len(children(t, conn, root, "LD")) == 4 })
			l0 := e.LocalHandoffs()
			if end == "gave-up" {
				var once sync.Once
				restore := lock.SetHandoffHook(func(s string) {
					if s == "answer" {
						once.Do(func() { cancel(); <-succ })
					}
				})
				release(t, h)
				restore()
			} else {
				release(t, h)
				if err := <-succ; err != nil {
					t.Fatalf("successor: %v", err)
				}
				if e.LocalHandoffs()-l0 != 1 {
					t.Fatalf("no local handoff: the test did not exercise the path")
				}
				g := <-granted
				if end == "release" {
					release(t, g)
				} else if err := g.Abandon(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if err := <-w; err != nil {
				t.Fatalf("lock-delay waiter: %v", err)
			}
			want := int64(0)
			if end == "abandon" {
				want = 1
			}
			if n := waiter.Health().LockDelays - before; n != want {
				t.Errorf("lock-delays waited out: %d, want %d", n, want)
			}
			waitFor(t, 10*time.Second, "nothing left", func() bool { return len(children(t, conn, root, "LD")) == 0 })
		})
	}
}

// Native protocol, the engine's waiters sharing reads (commit 657ddfd):
// eight waiters on one cut engine (every request about the object may
// lose its reply) and two on a clean one, exclusive and shared, foreground
// and background, some waits cut short: never an exclusive grant beside
// another grant, exclusive tokens increase, no grant lost while its
// session lives, nothing left, the object free at the end. Run with -race:
// the views are shared between the waiters' goroutines.
func TestReviewNativeSharedViewsFuzz(t *testing.T) {
	if testing.Short() {
		t.Skip("random cuts")
	}
	t.Parallel()
	root := testRoot(t, zkServer)
	const obj = "sv"
	objPath := root + "/" + obj
	cutter := &randCutter{rng: rand.New(rand.NewSource(31))}
	cut := newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) {
		o.Dialer = cutter.dial
		o.SessionTimeout = 6 * time.Second
	})
	clean := newEngine(t, zkServer.Servers(), root, native)
	release(t, acquire(t, clean, obj, lock.Foreground, lock.AcquireOptions{}))
	cutter.set(objPath, 0.02)
	var chk rwChecker
	var mu sync.Mutex
	var violations []string
	var granted, ended, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range 10 {
		e := cut
		if w >= 8 {
			e = clean
		}
		wg.Go(func() {
			rng := rand.New(rand.NewSource(int64(300 + w)))
			for range 12 {
				shared := rng.Intn(3) == 0
				typ := lock.Foreground
				if rng.Intn(5) == 0 {
					typ = lock.Background
				}
				wait := 2 * time.Minute
				short := rng.Intn(4) == 0
				if short {
					wait = time.Duration(1+rng.Intn(20)) * time.Millisecond
				}
				g, err := e.Acquire(context.Background(), obj, typ, lock.AcquireOptions{Shared: shared, Wait: wait})
				if err != nil {
					if short {
						ended.Add(1)
					} else {
						failed.Add(1)
						t.Logf("waiter %d: %v", w, err)
					}
					continue
				}
				granted.Add(1)
				chk.enter(shared, g.Token())
				time.Sleep(time.Duration(rng.Intn(2)) * time.Millisecond)
				chk.leave(shared)
				if err := g.Err(); err != nil {
					mu.Lock()
					violations = append(violations, fmt.Sprintf("waiter %d: grant %d lost while held: %v", w, g.Token(), err))
					mu.Unlock()
				}
				if err := g.Release(context.Background()); err != nil && g.Err() == nil {
					mu.Lock()
					violations = append(violations, fmt.Sprintf("waiter %d: release of %d: %v", w, g.Token(), err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	cutter.set("", 0)
	t.Logf("granted %d, short waits ended %d, failed %d, cuts %d, local handoffs %d", granted.Load(), ended.Load(), failed.Load(), cutter.count(), cut.LocalHandoffs())
	if chk.violations != 0 || chk.badToken != 0 {
		t.Errorf("exclusion violations %d, non-increasing exclusive tokens %d", chk.violations, chk.badToken)
	}
	for _, v := range violations {
		t.Error(v)
	}
	if failed.Load() > 0 {
		t.Errorf("%d acquires with a long wait failed", failed.Load())
	}
	conn := rawConn(t, zkServer.Servers())
	assertNoLeftovers(t, conn, root)
	g, err := clean.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{TryOnce: true})
	if err != nil {
		data, _, _ := conn.Get(objPath)
		t.Fatalf("object not free at the end: %v (data %s)", err, data)
	}
	release(t, g)
}

// The holder's release context ends with the handoff multi in flight: the
// release returns (it completes in the background) and the same engine at
// once tries again with a foreground TryOnce and a waiting acquire: neither
// is granted beside the successor, the successor is granted with a higher
// token, and everything ends free.
func TestReviewPlocalReleaseCtxEndsInFlight(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
	conn := rawConn(t, zkServer.Servers())
	h := acquire(t, e, "RC", lock.Foreground, lock.AcquireOptions{})
	var chk overlapChecker
	ch := make(chan *lock.Grant, 1)
	go func() {
		g, err := e.Acquire(context.Background(), "RC", lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		ch <- g
	}()
	waitFor(t, 10*time.Second, "the waiter offered a handoff", func() bool { return e.HandoffOffers("RC") == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	gate := make(chan struct{})
	var once sync.Once
	restore := lock.SetHandoffHook(func(s string) {
		if s == "send" {
			once.Do(func() { cancel(); <-gate })
		}
	})
	l0 := e.LocalHandoffs()
	if err := h.Release(ctx); err != nil {
		t.Errorf("release: %v", err)
	}
	// the multi is not sent yet: the old holder queues again
	again := make(chan *lock.Grant, 1)
	go func() {
		g, err := e.Acquire(context.Background(), "RC", lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		again <- g
	}()
	if g, err := e.Acquire(context.Background(), "RC", lock.Foreground, lock.AcquireOptions{TryOnce: true}); err == nil {
		t.Errorf("TryOnce granted (token %d) while the release's handoff is in flight", g.Token())
		release(t, g)
	}
	close(gate)
	restore()
	g := <-ch
	if g == nil {
		t.FailNow()
	}
	chk.enter(g.Token())
	if g.Token() <= h.Token() {
		t.Errorf("token %d not above %d", g.Token(), h.Token())
	}
	select {
	case g2 := <-again:
		t.Errorf("the old holder's new acquire granted (token %d) beside the successor (%d)", g2.Token(), g.Token())
	case <-time.After(50 * time.Millisecond):
	}
	chk.leave()
	release(t, g)
	g2 := <-again
	if g2 == nil {
		t.FailNow()
	}
	chk.enter(g2.Token())
	chk.leave()
	release(t, g2)
	if chk.overlaps != 0 || chk.badToken != 0 {
		t.Errorf("overlaps %d, non-increasing tokens %d", chk.overlaps, chk.badToken)
	}
	t.Logf("local handoffs %d", e.LocalHandoffs()-l0)
	waitFor(t, 10*time.Second, "nothing left", func() bool { return len(children(t, conn, root, "RC")) == 0 })
}

// One engine, eight foreground waiters on one object, each wait cut short
// at a random moment (0-4 ms: cancels land on handoffs in flight) or
// waiting; holders release right away. Never two holders, tokens increase,
// nothing left, and most handoffs were local.
func TestReviewPlocalOneEngineCancels(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.ObjectNode = lock.Persistent; o.HolderWatchDelay = time.Millisecond })
	conn := rawConn(t, zkServer.Servers())
	t.Cleanup(func() { _ = conn.Delete(root+"/OC", -1) })
	var chk overlapChecker
	var granted, gaveUp atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewSource(int64(500 + w)))
			for range 30 {
				ctx, cancel := context.WithCancel(context.Background())
				if rng.Intn(2) == 0 {
					time.AfterFunc(time.Duration(rng.Intn(5000))*time.Microsecond, cancel)
				}
				g, err := e.Acquire(ctx, "OC", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
				cancel()
				if err != nil {
					var ile *lock.InstanceLockError
					if !errors.As(err, &ile) {
						t.Errorf("acquire: %v", err)
					}
					gaveUp.Add(1)
					continue
				}
				granted.Add(1)
				chk.enter(g.Token())
				chk.leave()
				if err := g.Release(context.Background()); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("granted %d, gave up %d, local handoffs %d", granted.Load(), gaveUp.Load(), e.LocalHandoffs())
	if chk.overlaps != 0 || chk.badToken != 0 {
		t.Errorf("overlaps %d, non-increasing tokens %d", chk.overlaps, chk.badToken)
	}
	if e.LocalHandoffs() == 0 {
		t.Errorf("no local handoff: the test did not exercise the path")
	}
	waitFor(t, 10*time.Second, "nothing left", func() bool { return len(children(t, conn, root, "OC")) == 0 })
	if n := e.HandoffOffers("OC"); n != 0 {
		t.Errorf("%d handoff offers left", n)
	}
}

// Aging and the local handoff: another engine's background waiter that
// aged before the local foreground waiter queued sorts ahead of it (the
// local waiter watches it, no handoff: the aged one is granted first); one
// that had not aged yet stays behind it for good (the local waiter is
// handed the lock).
func TestReviewPlocalAgedBackgroundBetween(t *testing.T) {
	for _, aged := range []bool{true, false} {
		t.Run(fmt.Sprintf("aged=%v", aged), func(t *testing.T) {
			root := testRoot(t, zkServer)
			e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
			bgAge := 150 * time.Millisecond
			if !aged {
				bgAge = time.Minute
			}
			e2 := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.BackgroundMaxWait = bgAge })
			conn := rawConn(t, zkServer.Servers())
			h := acquire(t, e, "AG", lock.Foreground, lock.AcquireOptions{})
			var chk overlapChecker
			chk.enter(h.Token())
			order := make(chan string, 2)
			var wg sync.WaitGroup
			take := func(e *lock.Engine, typ lock.Type, who string) { holdInOrder(t, e, "AG", typ, who, &chk, order) }
			wg.Go(func() { take(e2, lock.Background, "background") })
			waitFor(t, 10*time.Second, "background queued", func() bool { return len(children(t, conn, root, "AG")) == 3 })
			if aged {
				time.Sleep(3 * bgAge) // aged (by the server's ctime) before the foreground one is created
			}
			wg.Go(func() { take(e, lock.Foreground, "local-foreground") })
			waitFor(t, 10*time.Second, "foreground queued", func() bool { return len(children(t, conn, root, "AG")) == 4 })
			if !aged {
				waitFor(t, 10*time.Second, "the local waiter offered a handoff", func() bool { return e.HandoffOffers("AG") == 1 })
			} else { // (its offer, if any, names the aged node it watches: no holder of ours)
				time.Sleep(50 * time.Millisecond) // watching (the order must hold either way)
			}
			l0 := e.LocalHandoffs()
			chk.leave()
			release(t, h)
			wg.Wait()
			first, second := <-order, <-order
			want := "local-foreground"
			if aged {
				want = "background"
			}
			if first != want {
				t.Errorf("order %s, %s; want %s first", first, second, want)
			}
			n := e.LocalHandoffs() - l0
			if aged && n != 0 {
				t.Errorf("%d local handoffs past an aged background waiter", n)
			}
			if !aged && n != 1 {
				t.Errorf("%d local handoffs, want 1", n)
			}
			if chk.overlaps != 0 || chk.badToken != 0 {
				t.Errorf("overlaps=%d non-increasing tokens=%d", chk.overlaps, chk.badToken)
			}
		})
	}
}
