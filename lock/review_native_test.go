package lock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
)

// Independent review of the native protocol (issue 21 §2, issue 22 §1).

// deleteTree deletes p and everything under it, as an operator's zkCli
// deleteall does.
func deleteTree(t testing.TB, conn *zk.Conn, p string) {
	t.Helper()
	kids, _, err := conn.Children(p)
	if err != nil {
		t.Fatalf("deleteall %s: %v", p, err)
	}
	for _, k := range kids {
		deleteTree(t, conn, p+"/"+k)
	}
	if err := conn.Delete(p, -1); err != nil {
		t.Fatalf("deleteall %s: %v", p, err)
	}
}

// grantAsync acquires in the background; the channel delivers the grant or
// the error.
type asyncResult struct {
	g   *lock.Grant
	err error
}

func grantAsync(ctx context.Context, e *lock.Engine, obj string, typ lock.Type, o lock.AcquireOptions) <-chan asyncResult {
	ch := make(chan asyncResult, 1)
	go func() {
		g, err := e.Acquire(ctx, obj, typ, o)
		ch <- asyncResult{g, err}
	}()
	return ch
}

// The successor's session is lost between the holder's listing and its
// release: the release names a waiter whose child is gone. Nobody may be
// granted beside anyone, and the waiter behind it, which asks for a
// lock-delay, must not be delayed: the holder released cleanly and the
// named successor never held (the doc: "A clean release is not delayed").
func TestReviewNativeSuccessorSessionLost(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	eA := newEngine(t, zkServer.Servers(), root, native)
	eB := newEngine(t, zkServer.Servers(), root, native)
	eC := newEngine(t, zkServer.Servers(), root, native)
	ctx := context.Background()
	gate := acquire(t, eA, "s", lock.Foreground, lock.AcquireOptions{})
	hch := grantAsync(ctx, eA, "s", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
	waitFor(t, 10*time.Second, "H queued", func() bool { return len(children(t, conn, root, "s")) == 3 })
	sch := grantAsync(ctx, eB, "s", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
	waitFor(t, 10*time.Second, "S queued", func() bool { return len(children(t, conn, root, "s")) == 4 })
	wch := grantAsync(ctx, eC, "s", lock.Foreground, lock.AcquireOptions{Wait: 4 * time.Second, LockDelay: time.Minute})
	waitFor(t, 10*time.Second, "W queued", func() bool { return len(children(t, conn, root, "s")) == 5 })
	time.Sleep(100 * time.Millisecond)
	release(t, gate) // names nobody (granted alone): H lists [H S W] and takes
	h := <-hch
	if h.err != nil {
		t.Fatal(h.err)
	}
	var chk overlapChecker
	chk.enter(h.g.Token())
	eB.Close() // S's session ends: its child goes, H's queue still names it
	waitFor(t, 10*time.Second, "S gone", func() bool { return len(children(t, conn, root, "s")) == 3 })
	if r := <-sch; r.err == nil {
		t.Fatal("S granted after its engine closed")
	}
	time.Sleep(100 * time.Millisecond) // W is watching H again
	chk.leave()
	release(t, h.g)
	w := <-wch
	if w.err != nil {
		t.Fatalf("W after a clean release (its predecessor's session ended before the release): %v; want a grant without a lock-delay (delays waited out: %d)", w.err, eC.Health().LockDelays)
	}
	chk.enter(w.g.Token())
	chk.leave()
	if chk.overlaps != 0 || chk.badToken != 0 {
		t.Errorf("overlaps=%d bad tokens=%d", chk.overlaps, chk.badToken)
	}
	release(t, w.g)
}

// A plugin holder under a native root that the engine has used before (its
// sentinel known): an operator deleted the sentinel and a plugin
// participant took the object with an ephemeral privateLock. A native
// acquire must fail with ErrForeignNode naming the root, never be granted
// beside it.
func TestReviewNativeForeignPrivateLockAfterSentinelDeleted(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	e := newEngine(t, zkServer.Servers(), root, native)
	release(t, acquire(t, e, "p", lock.Foreground, lock.AcquireOptions{}))
	objPath := root + "/p"
	deleteTree(t, conn, objPath+"/privateLock") // zkCli deleteall

	plugin := rawConn(t, zkServer.Servers())
	if _, err := plugin.Create(objPath+"/privateLock", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	g, err := e.Acquire(context.Background(), "p", lock.Foreground, lock.AcquireOptions{Wait: 2 * time.Second})
	if err == nil {
		release(t, g)
		t.Fatalf("granted (token %d) beside a plugin holder's ephemeral privateLock", g.Token())
	}
	if !errors.Is(err, lock.ErrForeignNode) || !strings.Contains(err.Error(), root) {
		t.Fatalf("acquire beside a plugin holder: %v; want ErrForeignNode naming %s", err, root)
	}
	plugin.Close()
}

// An operator deleted the object node (sentinel and all) and re-created
// it plainly. The engine's next grant there must leave the sentinel in
// place again, so that the original plugin (pluginLock) is kept out and
// never granted beside the native holder.
func TestReviewNativeObjectRecreatedKeepsPluginOut(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	e := newEngine(t, zkServer.Servers(), root, native)
	release(t, acquire(t, e, "r", lock.Foreground, lock.AcquireOptions{}))
	objPath := root + "/r"
	deleteTree(t, conn, objPath) // zkCli deleteall
	if _, err := conn.Create(objPath, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	g := acquire(t, e, "r", lock.Foreground, lock.AcquireOptions{})
	pl := &pluginLock{conn: rawConn(t, zkServer.Servers()), objPath: objPath}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	tok, err := pl.lock(ctx, "A")
	cancel()
	if err == nil {
		_ = pl.unlock()
		release(t, g)
		t.Fatalf("plugin granted (token %d) beside the native holder (token %d)", tok, g.Token())
	}
	release(t, g)
}

// Upgrade: a shared holder's own engine asks for an exclusive lock on the
// object. The engine cannot tell the asker from any other client of the
// sidecar, so it queues it: it must not be granted beside the shared
// holder, and its wait ends with an InstanceLockError naming the shared
// holder (not a silent hang past Wait).
func TestReviewNativeUpgradeWaits(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, native)
	s := acquire(t, e, "u", lock.Foreground, lock.AcquireOptions{Shared: true})
	g, err := e.Acquire(context.Background(), "u", lock.Foreground, lock.AcquireOptions{Wait: 500 * time.Millisecond})
	if err == nil {
		release(t, g)
		t.Fatal("exclusive granted beside the engine's own shared holder")
	}
	var ile *lock.InstanceLockError
	if !errors.As(err, &ile) || ile.Holder == nil || ile.Holder.RequestID != s.RequestID() {
		t.Fatalf("upgrade: %v (holder %+v); want an InstanceLockError naming the shared holder %s", err, ile, s.RequestID())
	}
	// a second shared grant beside it is fine
	s2 := acquire(t, e, "u", lock.Foreground, lock.AcquireOptions{Shared: true})
	release(t, s2)
	release(t, s)
}

// A local successor (same engine) whose wait ends exactly when the holder
// hands it the lock: no node is left behind, nobody is granted beside
// anyone, and the next waiter (another engine, with a lock-delay: every
// release here is clean) gets the lock without a delay.
func TestReviewNativeLocalSuccessorCancelledAtHandoff(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	eA := newEngine(t, zkServer.Servers(), root, native)
	eC := newEngine(t, zkServer.Servers(), root, native)
	bg := context.Background()
	var chk overlapChecker
	hits := 0
	for i := range 12 {
		h := acquire(t, eA, "l", lock.Foreground, lock.AcquireOptions{})
		sctx, scancel := context.WithCancel(bg)
		sch := grantAsync(sctx, eA, "l", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
		waitFor(t, 10*time.Second, "S queued", func() bool { return len(children(t, conn, root, "l")) == 3 })
		wch := grantAsync(bg, eC, "l", lock.Foreground, lock.AcquireOptions{Wait: 3 * time.Second, LockDelay: time.Minute})
		waitFor(t, 10*time.Second, "W queued", func() bool { return len(children(t, conn, root, "l")) == 4 })
		time.Sleep(20 * time.Millisecond)
		chk.enter(h.Token())
		chk.leave()
		// release and cancel together; H's grant knew nobody waiting (it
		// was granted alone), so stagger a little around the handoff
		go func() {
			time.Sleep(time.Duration(i%4) * 300 * time.Microsecond)
			scancel()
		}()
		release(t, h)
		s := <-sch
		if s.err == nil {
			hits++
			chk.enter(s.g.Token())
			chk.leave()
			release(t, s.g)
		}
		w := <-wch
		if w.err != nil {
			t.Fatalf("round %d: W: %v (S granted: %v); want a grant without a lock-delay after clean releases", i, w.err, s.err == nil)
		}
		chk.enter(w.g.Token())
		chk.leave()
		release(t, w.g)
	}
	t.Logf("S granted in %d of 12 rounds", hits)
	if chk.overlaps != 0 || chk.badToken != 0 {
		t.Errorf("overlaps=%d bad tokens=%d", chk.overlaps, chk.badToken)
	}
}

// Check answers stale for the old token right after an in-process handoff
// and a cross-engine one, from another engine; tokens increase.
func TestReviewNativeCheckAfterHandoff(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	eA := newEngine(t, zkServer.Servers(), root, native)
	eB := newEngine(t, zkServer.Servers(), root, native)
	eC := newEngine(t, zkServer.Servers(), root, native)
	bg := context.Background()
	g1 := acquire(t, eA, "c", lock.Foreground, lock.AcquireOptions{})
	ch2 := grantAsync(bg, eA, "c", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
	waitFor(t, 10*time.Second, "2 queued", func() bool { return len(children(t, conn, root, "c")) == 3 })
	ch3 := grantAsync(bg, eB, "c", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
	waitFor(t, 10*time.Second, "3 queued", func() bool { return len(children(t, conn, root, "c")) == 4 })
	time.Sleep(50 * time.Millisecond)
	release(t, g1)
	r2 := <-ch2
	if r2.err != nil {
		t.Fatal(r2.err)
	}
	for _, tc := range []struct {
		tok  int64
		want bool
	}{{g1.Token(), false}, {r2.g.Token(), true}} {
		cur, holder, err := eC.Check(bg, "c", tc.tok)
		if err != nil || cur != tc.want || holder != r2.g.Token() {
			t.Errorf("Check(%d) after the local handoff = %v, %d, %v; want %v, %d", tc.tok, cur, holder, err, tc.want, r2.g.Token())
		}
	}
	release(t, r2.g)
	r3 := <-ch3
	if r3.err != nil {
		t.Fatal(r3.err)
	}
	if !(g1.Token() < r2.g.Token() && r2.g.Token() < r3.g.Token()) {
		t.Errorf("tokens %d %d %d not increasing", g1.Token(), r2.g.Token(), r3.g.Token())
	}
	cur, holder, err := eC.Check(bg, "c", r2.g.Token())
	if err != nil || cur || holder != r3.g.Token() {
		t.Errorf("Check(old) after the cross-engine handoff = %v, %d, %v; want stale, %d", cur, holder, err, r3.g.Token())
	}
	release(t, r3.g)
}

var _ = fmt.Sprint
var _ = rand.Int
var _ = path.Base
var _ sync.Mutex
var _ atomic.Int64

// A shared request granted past a shared waiter ahead of it that has not
// taken yet (its read was slow): when it releases, that waiter is still
// first in order and must come before the exclusive request behind them.
// The holder's queue listed only the waiters behind it, so its release
// named the exclusive one out of turn; in TestNativeSharedStress that
// deadlocked (the named exclusive request watched the shared waiter ahead
// of it, which watched the exclusive holder).
func TestReviewNativeSharedPastSharedKeepsOrder(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	objPath := root + "/d"
	var st staller
	eA := newEngine(t, zkServer.Servers(), root, native)
	eB := newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) { o.Dialer = st.dial })
	eC := newEngine(t, zkServer.Servers(), root, native)
	bg := context.Background()
	g := acquire(t, eA, "d", lock.Foreground, lock.AcquireOptions{})
	wch := grantAsync(bg, eB, "d", lock.Foreground, lock.AcquireOptions{Shared: true, Wait: time.Minute})
	waitFor(t, 10*time.Second, "W queued", func() bool { return len(children(t, conn, root, "d")) == 3 })
	hch := grantAsync(bg, eA, "d", lock.Foreground, lock.AcquireOptions{Shared: true, Wait: time.Minute})
	waitFor(t, 10*time.Second, "H queued", func() bool { return len(children(t, conn, root, "d")) == 4 })
	rch := grantAsync(bg, eC, "d", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
	waitFor(t, 10*time.Second, "R queued", func() bool { return len(children(t, conn, root, "d")) == 5 })
	time.Sleep(100 * time.Millisecond) // everyone watches
	st.arm(objPath, objPath)           // W's read after G's release is not answered
	release(t, g)
	h := <-hch
	if h.err != nil {
		t.Fatal(h.err)
	}
	waitFor(t, 10*time.Second, "W's read swallowed", func() bool { return st.count() > 0 })
	release(t, h.g)
	time.Sleep(200 * time.Millisecond)
	st.lift()
	var order []string
	for range 2 {
		select {
		case w := <-wch:
			if w.err != nil {
				t.Fatalf("W: %v", w.err)
			}
			order = append(order, "W")
			release(t, w.g)
		case r := <-rch:
			if r.err != nil {
				t.Fatalf("R: %v", r.err)
			}
			order = append(order, "R")
			release(t, r.g)
		case <-time.After(15 * time.Second):
			t.Fatalf("stuck after %v (W shared ahead, R exclusive behind: two waiters watching each other?)", order)
		}
	}
	if order[0] != "W" {
		t.Errorf("grant order %v: the exclusive request R overtook the shared waiter W ahead of it", order)
	}
}

// A successor named in the release multi just as it gives up (its read of
// the grant is slow, then its wait ends): it never learnt of the grant, so
// its end is no vanish. Nobody is granted beside anyone, no node is left,
// and the waiter behind it, which asks for a lock-delay, is granted
// without one (every release here is clean).
func TestReviewNativeSuccessorCancelledDuringHandoff(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	objPath := root + "/h"
	var st staller
	eA := newEngine(t, zkServer.Servers(), root, native)
	eB := newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) { o.Dialer = st.dial })
	eC := newEngine(t, zkServer.Servers(), root, native)
	bg := context.Background()
	gate := acquire(t, eA, "h", lock.Foreground, lock.AcquireOptions{})
	hch := grantAsync(bg, eA, "h", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
	waitFor(t, 10*time.Second, "H queued", func() bool { return len(children(t, conn, root, "h")) == 3 })
	sctx, scancel := context.WithCancel(bg)
	defer scancel()
	sch := grantAsync(sctx, eB, "h", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
	waitFor(t, 10*time.Second, "S queued", func() bool { return len(children(t, conn, root, "h")) == 4 })
	wch := grantAsync(bg, eC, "h", lock.Foreground, lock.AcquireOptions{Wait: 8 * time.Second, LockDelay: time.Minute})
	waitFor(t, 10*time.Second, "W queued", func() bool { return len(children(t, conn, root, "h")) == 5 })
	time.Sleep(100 * time.Millisecond)
	release(t, gate) // H lists [H S W] and takes
	h := <-hch
	if h.err != nil {
		t.Fatal(h.err)
	}
	var chk overlapChecker
	chk.enter(h.g.Token())
	st.arm(objPath, objPath) // S's read of its grant is not answered
	chk.leave()
	release(t, h.g) // names S
	waitFor(t, 10*time.Second, "S's read swallowed", func() bool { return st.count() > 0 })
	scancel()
	if s := <-sch; s.err == nil {
		t.Fatal("S granted after its wait ended")
	}
	st.lift()
	w := <-wch
	if w.err != nil {
		t.Fatalf("W: %v; want a grant without a lock-delay (S never learnt of its grant; delays waited out: %d)", w.err, eC.Health().LockDelays)
	}
	chk.enter(w.g.Token())
	chk.leave()
	release(t, w.g)
	if chk.overlaps != 0 || chk.badToken != 0 {
		t.Errorf("overlaps=%d bad tokens=%d", chk.overlaps, chk.badToken)
	}
}

// Shared and exclusive requests from several engines at random, three of
// them behind random cutters (any request about the object may lose its
// reply: releases, grants, creates, give-backs), some with waits short
// enough to end at any point of the protocol: never an exclusive holder
// beside another holder, exclusive tokens above every earlier grant, no
// grant lost while its session lives, no node left, and the object free
// at the end.
func TestReviewNativeFuzzCutsCancels(t *testing.T) {
	if testing.Short() {
		t.Skip("random cuts")
	}
	t.Parallel()
	root := testRoot(t, zkServer)
	const obj = "fz"
	objPath := root + "/" + obj
	cutters := []*randCutter{{rng: rand.New(rand.NewSource(11))}, {rng: rand.New(rand.NewSource(12))}, {rng: rand.New(rand.NewSource(13))}}
	var engines []*lock.Engine
	for _, c := range cutters {
		engines = append(engines, newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) {
			o.Dialer = c.dial
			o.SessionTimeout = 6 * time.Second
		}))
	}
	engines = append(engines, newEngine(t, zkServer.Servers(), root, native))
	// the object and its sentinel exist before the cuts start
	release(t, acquire(t, engines[3], obj, lock.Foreground, lock.AcquireOptions{}))
	for _, c := range cutters {
		c.set(objPath, 0.05)
	}
	var chk rwChecker
	var mu sync.Mutex
	var violations []string
	var granted, failed, cancelled atomic.Int64
	var wg sync.WaitGroup
	for i, e := range engines {
		for w := range 2 {
			wg.Go(func() {
				rng := rand.New(rand.NewSource(int64(100*i + w)))
				for c := range 12 {
					shared := rng.Intn(2) == 0
					typ := lock.Foreground
					if rng.Intn(4) == 0 {
						typ = lock.Background
					}
					wait := 30 * time.Second
					if typ == lock.Background {
						// foreground requests go first: under a steady
						// foreground stream (aging is not in the native
						// protocol) a background one waits for the stream
						wait = 2 * time.Minute
					}
					if rng.Intn(4) == 0 {
						wait = time.Duration(1+rng.Intn(30)) * time.Millisecond
					}
					g, err := e.Acquire(context.Background(), obj, typ, lock.AcquireOptions{Shared: shared, Wait: wait})
					if err != nil {
						if wait < time.Second { // a short wait may end anywhere, disconnected too
							cancelled.Add(1)
						} else {
							failed.Add(1)
							t.Logf("engine %d round %d: %v", i, c, err)
						}
						continue
					}
					granted.Add(1)
					chk.enter(shared, g.Token())
					time.Sleep(time.Duration(rng.Intn(3)) * time.Millisecond)
					chk.leave(shared)
					if err := g.Err(); err != nil {
						mu.Lock()
						violations = append(violations, fmt.Sprintf("engine %d: grant %d lost while held: %v", i, g.Token(), err))
						mu.Unlock()
					}
					if err := g.Release(context.Background()); err != nil && g.Err() == nil {
						mu.Lock()
						violations = append(violations, fmt.Sprintf("engine %d: release of %d: %v", i, g.Token(), err))
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	for _, c := range cutters {
		c.set("", 0)
	}
	cuts := 0
	for _, c := range cutters {
		cuts += c.count()
	}
	t.Logf("granted %d (exclusive %d, shared %d, most shared together %d), waits ended %d, failed %d, cuts %d", granted.Load(), chk.exclGrants, chk.shGrts, chk.maxShared, cancelled.Load(), failed.Load(), cuts)
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
	// the object is free: a try-once exclusive acquire is granted
	g, err := engines[3].Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{TryOnce: true})
	if err != nil {
		data, _, _ := conn.Get(objPath)
		t.Fatalf("object not free at the end: %v (data %s)", err, data)
	}
	release(t, g)
}

// A sidecar killed mid-handoff: the holder's engine closes as its release
// multi is sent. Whether or not the multi landed, the waiter on another
// engine is granted, with a higher token, and nothing is left.
func TestReviewNativeKilledMidHandoff(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	bg := context.Background()
	eB := newEngine(t, zkServer.Servers(), root, native)
	for i := range 4 {
		eA := newEngine(t, zkServer.Servers(), root, native)
		gate := acquire(t, eA, "k", lock.Foreground, lock.AcquireOptions{})
		hch := grantAsync(bg, eA, "k", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
		waitFor(t, 10*time.Second, "H queued", func() bool { return len(children(t, conn, root, "k")) == 3 })
		sch := grantAsync(bg, eB, "k", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
		waitFor(t, 10*time.Second, "S queued", func() bool { return len(children(t, conn, root, "k")) == 4 })
		time.Sleep(50 * time.Millisecond)
		release(t, gate) // H takes, knowing S
		h := <-hch
		if h.err != nil {
			t.Fatal(h.err)
		}
		go func() { _ = h.g.Release(bg) }()
		time.Sleep(time.Duration(i) * 500 * time.Microsecond)
		eA.Close()
		s := <-sch
		if s.err != nil {
			t.Fatalf("round %d: S after the holder's engine closed mid-handoff: %v", i, s.err)
		}
		if s.g.Token() <= h.g.Token() {
			t.Errorf("round %d: token %d after %d", i, s.g.Token(), h.g.Token())
		}
		release(t, s.g)
	}
}

// A background successor while a foreground request arrives: the holder
// knows only the background waiter and names nobody; the foreground
// request, which sorts ahead, is granted first; no two waiters wait for
// each other.
func TestReviewNativeBackgroundSuccessorForegroundArrives(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	bg := context.Background()
	eA := newEngine(t, zkServer.Servers(), root, native)
	eB := newEngine(t, zkServer.Servers(), root, native)
	eC := newEngine(t, zkServer.Servers(), root, native)
	gate := acquire(t, eA, "b", lock.Foreground, lock.AcquireOptions{})
	hch := grantAsync(bg, eA, "b", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
	waitFor(t, 10*time.Second, "H queued", func() bool { return len(children(t, conn, root, "b")) == 3 })
	bch := grantAsync(bg, eB, "b", lock.Background, lock.AcquireOptions{Wait: time.Minute})
	waitFor(t, 10*time.Second, "B queued", func() bool { return len(children(t, conn, root, "b")) == 4 })
	time.Sleep(50 * time.Millisecond)
	release(t, gate)
	h := <-hch // knows B only
	if h.err != nil {
		t.Fatal(h.err)
	}
	fch := grantAsync(bg, eC, "b", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
	waitFor(t, 10*time.Second, "F queued", func() bool { return len(children(t, conn, root, "b")) == 4 })
	time.Sleep(50 * time.Millisecond)
	release(t, h.g)
	var order []string
	var last int64
	for range 2 {
		var r asyncResult
		who := ""
		select {
		case r = <-bch:
			who = "B"
		case r = <-fch:
			who = "F"
		case <-time.After(15 * time.Second):
			t.Fatalf("stuck after %v: two waiters waiting for each other?", order)
		}
		if r.err != nil {
			t.Fatalf("%s: %v", who, r.err)
		}
		if r.g.Token() <= last {
			t.Errorf("%s: token %d after %d", who, r.g.Token(), last)
		}
		last = r.g.Token()
		order = append(order, who)
		time.Sleep(20 * time.Millisecond) // the other must not be granted meanwhile
		release(t, r.g)
	}
	if order[0] != "F" {
		t.Errorf("order %v: the background request went before the foreground one", order)
	}
}

// Lock-delay: a native holder that vanished (its engine closed) delays a
// waiter asking for one; an abandoned grant too; a clean release does not.
func TestReviewNativeLockDelay(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	bg := context.Background()
	eW := newEngine(t, zkServer.Servers(), root, native)
	delayed := func() int64 { return eW.Health().LockDelays }
	o := lock.AcquireOptions{Wait: 20 * time.Second, LockDelay: 300 * time.Millisecond}

	// clean release: not delayed
	eA := newEngine(t, zkServer.Servers(), root, native)
	g := acquire(t, eA, "ld", lock.Foreground, lock.AcquireOptions{})
	wch := grantAsync(bg, eW, "ld", lock.Foreground, o)
	waitFor(t, 10*time.Second, "W queued", func() bool { return len(children(t, conn, root, "ld")) == 3 })
	d0 := delayed()
	release(t, g)
	w := <-wch
	if w.err != nil {
		t.Fatal(w.err)
	}
	release(t, w.g)
	if delayed() != d0 {
		t.Errorf("a clean release delayed the next holder (%d delays)", delayed()-d0)
	}

	// vanished holder: delayed
	g = acquire(t, eA, "ld", lock.Foreground, lock.AcquireOptions{})
	wch = grantAsync(bg, eW, "ld", lock.Foreground, o)
	waitFor(t, 10*time.Second, "W queued", func() bool { return len(children(t, conn, root, "ld")) == 3 })
	d0 = delayed()
	eA.Close()
	w = <-wch
	if w.err != nil {
		t.Fatal(w.err)
	}
	if delayed() == d0 {
		t.Errorf("the grant after a vanished holder (engine closed) was not delayed")
	}
	if w.g.Token() <= g.Token() {
		t.Errorf("token %d after %d", w.g.Token(), g.Token())
	}
	release(t, w.g)

	// abandoned grant: delayed
	eA2 := newEngine(t, zkServer.Servers(), root, native)
	g = acquire(t, eA2, "ld", lock.Foreground, lock.AcquireOptions{})
	wch = grantAsync(bg, eW, "ld", lock.Foreground, o)
	waitFor(t, 10*time.Second, "W queued", func() bool { return len(children(t, conn, root, "ld")) == 3 })
	d0 = delayed()
	if err := g.Abandon(bg); err != nil {
		t.Fatal(err)
	}
	w = <-wch
	if w.err != nil {
		t.Fatal(w.err)
	}
	if delayed() == d0 {
		t.Errorf("the grant after an abandoned one was not delayed")
	}
	release(t, w.g)
}

// The fast path's prediction after others touched the object: another
// engine's grant (the data version moved) and a waiter created since (the
// sequence number moved) both send the request the long way; a waiter
// ahead keeps it from being granted; tokens increase throughout.
func TestReviewNativeFastPathAfterOthers(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	obs := &countObserver{}
	eA := newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) { o.Observer = obs })
	eB := newEngine(t, zkServer.Servers(), root, native)
	var last int64
	step := func(e *lock.Engine) {
		t.Helper()
		g := acquire(t, e, "f", lock.Foreground, lock.AcquireOptions{})
		if g.Token() <= last {
			t.Errorf("token %d after %d", g.Token(), last)
		}
		last = g.Token()
		release(t, g)
	}
	step(eA)
	step(eA) // predicted
	step(eB) // another engine's grant
	step(eA) // the prediction is stale: the long way, granted
	step(eA)
	// a waiter created since (by hand, the native layout): it is first
	w, err := conn.Create(root+"/f/A_x_byhand_", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	if g, err := eA.Acquire(context.Background(), "f", lock.Foreground, lock.AcquireOptions{Wait: 500 * time.Millisecond}); err == nil {
		release(t, g)
		t.Fatalf("granted (token %d) with a waiter ahead", g.Token())
	}
	if k := children(t, conn, root, "f"); len(k) != 2 {
		t.Errorf("children after the refused acquire: %v; want the sentinel and the hand-made waiter", k)
	}
	if err := conn.Delete(w, -1); err != nil {
		t.Fatal(err)
	}
	step(eA)
	step(eA)
	t.Logf("fast path: %d hits, %d misses", obs.hits.Load(), obs.misses.Load())
	if obs.hits.Load() == 0 || obs.misses.Load() == 0 {
		t.Errorf("fast path hits %d, misses %d: want both", obs.hits.Load(), obs.misses.Load())
	}
}

// Baton on the plugin protocol pointed at a native root (objects with
// only their sentinel, no holder): ErrForeignNode naming the root, and no
// node left.
func TestReviewNativePluginEngineOnNativeRoot(t *testing.T) {
	root := testRoot(t, zkServer)
	nat := newEngine(t, zkServer.Servers(), root, native)
	release(t, acquire(t, nat, "q", lock.Foreground, lock.AcquireOptions{}))
	plug := newEngine(t, zkServer.Servers(), root)
	for _, typ := range []lock.Type{lock.Foreground, lock.Background} {
		_, err := plug.Acquire(context.Background(), "q", typ, lock.AcquireOptions{Wait: 2 * time.Second})
		if !errors.Is(err, lock.ErrForeignNode) || !strings.Contains(err.Error(), root) {
			t.Fatalf("plugin engine on a native root (%v): %v; want ErrForeignNode naming %s", typ, err, root)
		}
	}
	_, err := plug.Acquire(context.Background(), "q", lock.Foreground, lock.AcquireOptions{TryOnce: true})
	if !errors.Is(err, lock.ErrForeignNode) {
		t.Errorf("plugin engine, try-once, on a native root: %v; want ErrForeignNode", err)
	}
}

// A reconnect with the release multi in flight: its reply lost (applied),
// or its write failed (not applied). Release returns; the successor on
// another engine is granted with a higher token, the waiter behind it
// (with a lock-delay) without a delay, and nothing is left.
func TestReviewNativeReleaseInFlight(t *testing.T) {
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied=%v", applied), func(t *testing.T) {
			root := testRoot(t, zkServer)
			conn := rawConn(t, zkServer.Servers())
			objPath := root + "/m"
			cut := &randCutter{rng: rand.New(rand.NewSource(1))}
			wf := &writeFailer{}
			dial := wf.dial
			if applied {
				dial = cut.dial
			}
			bg := context.Background()
			eA := newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) { o.Dialer = dial; o.HolderWatchDelay = time.Minute })
			eB := newEngine(t, zkServer.Servers(), root, native)
			eC := newEngine(t, zkServer.Servers(), root, native)
			gate := acquire(t, eA, "m", lock.Foreground, lock.AcquireOptions{})
			hch := grantAsync(bg, eA, "m", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
			waitFor(t, 10*time.Second, "H queued", func() bool { return len(children(t, conn, root, "m")) == 3 })
			sch := grantAsync(bg, eB, "m", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
			waitFor(t, 10*time.Second, "S queued", func() bool { return len(children(t, conn, root, "m")) == 4 })
			wch := grantAsync(bg, eC, "m", lock.Foreground, lock.AcquireOptions{Wait: 10 * time.Second, LockDelay: time.Minute})
			waitFor(t, 10*time.Second, "W queued", func() bool { return len(children(t, conn, root, "m")) == 5 })
			time.Sleep(50 * time.Millisecond)
			release(t, gate)
			h := <-hch
			if h.err != nil {
				t.Fatal(h.err)
			}
			if applied {
				cut.set(objPath, 1)
			} else {
				wf.arm(objPath)
			}
			if err := h.g.Release(bg); err != nil {
				t.Fatalf("release with its multi in flight: %v", err)
			}
			cut.set("", 0)
			if applied && cut.count() < 1 { // the release may list before its multi: that read can be cut too
				t.Fatalf("%d cuts, want the release multi's", cut.count())
			}
			s := <-sch
			if s.err != nil {
				t.Fatal(s.err)
			}
			if s.g.Token() <= h.g.Token() {
				t.Errorf("token %d after %d", s.g.Token(), h.g.Token())
			}
			release(t, s.g)
			w := <-wch
			if w.err != nil {
				t.Fatalf("W: %v (delays %d); want a grant without a lock-delay", w.err, eC.Health().LockDelays)
			}
			release(t, w.g)
		})
	}
}

// onceCutter lets the server apply the first request about one path (a
// multi by its first operation's path), then drops the connection before
// the reply: once. Reconnects are at once.
type onceCutter struct {
	mu   sync.Mutex
	path string
	cuts int
}

func (c *onceCutter) arm(p string) { c.mu.Lock(); c.path = p; c.mu.Unlock() }

func (c *onceCutter) count() int { c.mu.Lock(); defer c.mu.Unlock(); return c.cuts }

func (c *onceCutter) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	nc, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &onceConn{cuttable: cuttable{Conn: nc, name: "onceConn"}, c: c}, nil
}

type onceConn struct {
	cuttable
	c      *onceCutter
	frames int
}

func (s *onceConn) Write(p []byte) (int, error) {
	s.frames++
	if s.frames == 1 || s.dead.Load() {
		return s.Conn.Write(p)
	}
	c := s.c
	c.mu.Lock()
	_, pth, ok := requestPath(p)
	cut := ok && c.path != "" && pth == c.path
	if cut {
		c.path = ""
		c.cuts++
		s.dead.Store(true)
	}
	c.mu.Unlock()
	if !cut {
		return s.Conn.Write(p)
	}
	n, err := s.Conn.Write(p)
	time.Sleep(20 * time.Millisecond)
	s.Conn.Close()
	return n, err
}

// A reconnect with a grant multi in flight: the waiter's take is applied
// and its reply lost. It gives the grant back (never reported) and queues
// again; the waiter behind it, with a lock-delay, is granted without one
// (nobody vanished), then the first; no overlap, tokens increase, nothing
// is left.
func TestReviewNativeGrantInFlight(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	objPath := root + "/gi"
	cut := &onceCutter{}
	bg := context.Background()
	eA := newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) { o.Dialer = cut.dial })
	eB := newEngine(t, zkServer.Servers(), root, native)
	eC := newEngine(t, zkServer.Servers(), root, native)
	h := acquire(t, eB, "gi", lock.Background, lock.AcquireOptions{}) // granted alone: names nobody
	rch := grantAsync(bg, eA, "gi", lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, RequestID: "rq1"})
	waitFor(t, 10*time.Second, "R queued", func() bool { return len(children(t, conn, root, "gi")) == 3 })
	var rnode string
	for _, k := range children(t, conn, root, "gi") {
		if strings.Contains(k, "_rq1~") || strings.Contains(k, "_rq1_") {
			rnode = k
		}
	}
	pch := grantAsync(bg, eC, "gi", lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, LockDelay: time.Minute})
	waitFor(t, 10*time.Second, "P queued", func() bool { return len(children(t, conn, root, "gi")) == 4 })
	time.Sleep(50 * time.Millisecond)
	cut.arm(objPath + "/" + rnode) // R's take (its first operation checks R's child)
	release(t, h)
	var chk overlapChecker
	chk.enter(h.Token())
	chk.leave()
	var order []string
	for range 2 {
		var r asyncResult
		who := ""
		select {
		case r = <-rch:
			who = "R"
		case r = <-pch:
			who = "P"
		case <-time.After(40 * time.Second):
			t.Fatalf("stuck after %v", order)
		}
		if r.err != nil {
			t.Fatalf("%s: %v (cuts %d, delays %d)", who, r.err, cut.count(), eC.Health().LockDelays)
		}
		order = append(order, who)
		chk.enter(r.g.Token())
		time.Sleep(20 * time.Millisecond)
		chk.leave()
		release(t, r.g)
	}
	t.Logf("order %v, cuts %d", order, cut.count())
	if cut.count() != 1 {
		t.Errorf("%d cuts, want R's take", cut.count())
	}
	if chk.overlaps != 0 || chk.badToken != 0 {
		t.Errorf("overlaps=%d bad tokens=%d", chk.overlaps, chk.badToken)
	}
}

// AcquireOptions.RequestID is the caller's: two requests may carry the
// same one (a job name, a retried idempotency key), on two engines. The
// native protocol names holders by request id; a second request with the
// holder's id must not find itself named and be granted beside it.
func TestReviewNativeSameRequestIDTwoEngines(t *testing.T) {
	root := testRoot(t, zkServer)
	eA := newEngine(t, zkServer.Servers(), root, native)
	eB := newEngine(t, zkServer.Servers(), root, native)
	o := lock.AcquireOptions{RequestID: "job-7"}
	g := acquire(t, eA, "id", lock.Foreground, o)
	o.Wait = time.Second
	if g2, err := eB.Acquire(context.Background(), "id", lock.Foreground, o); err == nil {
		defer g.Release(context.Background())
		defer g2.Release(context.Background())
		t.Fatalf("granted (token %d) beside the holder (token %d) that carries the same request id", g2.Token(), g.Token())
	}
	if g2, err := eA.Acquire(context.Background(), "id", lock.Foreground, o); err == nil {
		defer g.Release(context.Background())
		defer g2.Release(context.Background())
		t.Fatalf("same engine: granted (token %d) beside the holder (token %d) that carries the same request id", g2.Token(), g.Token())
	}
	release(t, g)
	o.Wait = 10 * time.Second
	release(t, acquire(t, eB, "id", lock.Foreground, o))
}

// slowReplies delays, once armed, every read from the server by d: a
// request sent meanwhile is applied at once and answered late.
type slowReplies struct {
	mu sync.Mutex
	d  time.Duration
}

func (s *slowReplies) set(d time.Duration) { s.mu.Lock(); s.d = d; s.mu.Unlock() }

func (s *slowReplies) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	nc, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &slowConn{Conn: nc, s: s}, nil
}

type slowConn struct {
	net.Conn
	s *slowReplies
}

func (c *slowConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.s.mu.Lock()
	d := c.s.d
	c.s.mu.Unlock()
	time.Sleep(d)
	return n, err
}

// A release whose ctx ends while its multi is in flight, the multi then
// failing (here: the successor it names left meanwhile, so its check
// fails): the release reports done, so the session must finish it. If it
// does not, the holder's child and name stay for as long as its session
// lives and nobody is granted again.
func TestReviewNativeReleaseCtxEndsMultiFails(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	slow := &slowReplies{}
	bg := context.Background()
	eA := newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) { o.Dialer = slow.dial; o.HolderWatchDelay = time.Minute })
	eB := newEngine(t, zkServer.Servers(), root, native)
	eC := newEngine(t, zkServer.Servers(), root, native)
	gate := acquire(t, eA, "rc", lock.Foreground, lock.AcquireOptions{})
	hch := grantAsync(bg, eA, "rc", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
	waitFor(t, 10*time.Second, "H queued", func() bool { return len(children(t, conn, root, "rc")) == 3 })
	sch := grantAsync(bg, eB, "rc", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
	waitFor(t, 10*time.Second, "S queued", func() bool { return len(children(t, conn, root, "rc")) == 4 })
	time.Sleep(50 * time.Millisecond)
	release(t, gate) // H takes, knowing S
	h := <-hch
	if h.err != nil {
		t.Fatal(h.err)
	}
	eB.Close() // S leaves: H's release multi will fail on its check of S
	<-sch
	waitFor(t, 10*time.Second, "S gone", func() bool { return len(children(t, conn, root, "rc")) == 2 })
	slow.set(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	err := h.g.Release(ctx)
	cancel()
	slow.set(0)
	t.Logf("release with its ctx ending in flight: %v", err)
	g, err := eC.Acquire(bg, "rc", lock.Foreground, lock.AcquireOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("after the release: %v (children %v)", err, children(t, conn, root, "rc"))
	}
	if g.Token() <= h.g.Token() {
		t.Errorf("token %d after %d", g.Token(), h.g.Token())
	}
	release(t, g)
}

// A waiter whose connection is down while the child it watches is
// deleted (the holder's release): after the reconnect it must wake. An
// exists watch on a node that existed is re-registered by the client as an
// exists watch, which the server re-arms on the missing node (it fires on
// a create only, and names never repeat): the waiter slept until its wait
// ran out.
func TestReviewNativeWatchedChildGoneWhileDisconnected(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	gate := &gateDialer{}
	bg := context.Background()
	eA := newEngine(t, zkServer.Servers(), root, native)
	eB := newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) { o.Dialer = gate.dial; o.SessionTimeout = 8 * time.Second })
	for _, typ := range []lock.Type{lock.Foreground, lock.Background} {
		h := acquire(t, eA, "wd", lock.Foreground, lock.AcquireOptions{})
		wch := grantAsync(bg, eB, "wd", typ, lock.AcquireOptions{Wait: 6 * time.Second})
		waitFor(t, 10*time.Second, "W queued", func() bool { return len(children(t, conn, root, "wd")) == 3 })
		time.Sleep(100 * time.Millisecond) // W watches H's child
		gate.close()
		waitFor(t, 10*time.Second, "W disconnected", func() bool { return !eB.Health().Connected })
		release(t, h)
		time.Sleep(200 * time.Millisecond)
		gate.open()
		w := <-wch
		if w.err != nil {
			t.Fatalf("%v waiter after its watched child went while it was disconnected: %v", typ, w.err)
		}
		if w.g.Token() <= h.Token() {
			t.Errorf("token %d after %d", w.g.Token(), h.Token())
		}
		release(t, w.g)
	}
}

// Writes to the object's data (shared holders joining and leaving, takes,
// hand-overs) race a release and the session's cleanup of it: every
// guarded write of theirs may fail on the version. Here another writer
// rewrites the data (unchanged) back to back while a holder releases. The
// release's cleanup must keep at it, not give up after a few tries and
// leave the holder's child and name blocking the object for as long as
// its session lives (the audit, every 30 s, was the only way out).
func TestReviewNativeCleanupUnderContention(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	objPath := root + "/kc"
	bg := context.Background()
	eA := newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
	eB := newEngine(t, zkServer.Servers(), root, native)
	h := acquire(t, eA, "kc", lock.Foreground, lock.AcquireOptions{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	data, _, err := conn.Get(objPath)
	if err != nil {
		t.Fatal(err)
	}
	for range 8 {
		wg.Go(func() {
			w := rawConn(t, zkServer.Servers())
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = w.Set(objPath, data, -1)
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	err = h.Release(bg)
	time.Sleep(2 * time.Second) // the session's cleanup runs meanwhile
	close(stop)
	wg.Wait()
	t.Logf("release under contention: %v", err)
	g, err := eB.Acquire(bg, "kc", lock.Foreground, lock.AcquireOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("after the release: %v (children %v)", err, children(t, conn, root, "kc"))
	}
	release(t, g)
}
