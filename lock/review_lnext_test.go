package lock_test

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
)

// Review of 4b3027b: a native release whose successors all wait on this
// engine hands on at most nativeLocalNext (8) names in the object's data
// ("n"), not up to 64.

// lnChild is a native child name's order key: foreground first, then by
// sequence ("A_x_<request id>_<10 digits>" with the default prefixes).
type lnChild struct {
	name string
	fg   bool
	seq  int64
}

func lnParse(name string) (lnChild, bool) {
	i := strings.LastIndexByte(name, '_')
	if i < 0 || len(name)-i-1 != 10 {
		return lnChild{}, false
	}
	seq, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil {
		return lnChild{}, false
	}
	return lnChild{name: name, fg: strings.HasPrefix(name, "A_"), seq: seq}, true
}

// ahead reports whether c sorts ahead of d in grant order.
func (c lnChild) ahead(d lnChild) bool {
	if c.fg != d.fg {
		return c.fg
	}
	return c.seq < d.seq
}

// lnOrder checks, while a grant holds, that no waiter it passed over is
// still there: a child that sorts ahead of the holder's and was created
// before it (a lower sequence: it waited when the holder queued), or one
// of the early set (children known to wait well before this grant) that
// sorts ahead of it. Either still waiting while the holder holds was
// passed over.
type lnOrder struct {
	mu     sync.Mutex
	early  map[string]bool
	passed []string
}

func (o *lnOrder) setEarly(kids []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.early = map[string]bool{}
	for _, k := range kids {
		o.early[k] = true
	}
}

func (o *lnOrder) check(t *testing.T, conn *zk.Conn, objPath string, g *lock.Grant) {
	me, ok := lnParse(g.Node())
	if !ok {
		t.Errorf("grant node %q is not a native child", g.Node())
		return
	}
	kids, _, err := conn.Children(objPath)
	if err != nil {
		t.Errorf("children of %s: %v", objPath, err)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range kids {
		c, ok := lnParse(k)
		if !ok || k == me.name || !c.ahead(me) {
			continue
		}
		if c.seq < me.seq || o.early[k] {
			o.passed = append(o.passed, fmt.Sprintf("%s held while %s waited", me.name, k))
		}
	}
}

// pollFor polls cond (no t.Fatal: callable off the test goroutine).
func pollFor(within time.Duration, cond func() bool) bool {
	end := time.Now().Add(within)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return cond()
}

// TestReviewLnextMixedDrainOrder: a long local drain (engine a's
// foreground waiters, handed on with short names) while a's waiters are
// cancelled mid-drain, then engine b's foreground waiters arrive mid-drain
// (a's listing does not know them: they sort behind a's foreground
// waiters and ahead of every background one a listed), and background
// waiters of both engines wait behind. Every holder checks that no waiter
// that sorts ahead of it and waited before it is still there (passed
// over), tokens rise, never two holders, every waiter not cancelled is
// granted. Catches a cut that does not keep the head of the names (e.g.
// nd.N = nd.N[len(nd.N)-8:]: a local successor names a waiter behind
// the ones cut, 4b3027b's change mutated), and a holder naming the
// background waiters of its stale listing ahead of b's later foreground
// ones (successors without its background stop).
func TestReviewLnextMixedDrainOrder(t *testing.T) {
	root := testRoot(t, zkServer)
	a := newEngine(t, zkServer.Servers(), root, native)
	b := newEngine(t, zkServer.Servers(), root, native)
	conn := rawConn(t, zkServer.Servers())
	const obj = "lnext-mixed"
	name, _ := lock.EscapeObject(obj)
	objPath := path.Join(root, name)

	var chk overlapChecker
	var ord lnOrder
	gate := acquire(t, a, obj, lock.Foreground, lock.AcquireOptions{})
	chk.enter(gate.Token())

	var (
		wg        sync.WaitGroup
		granted   atomic.Int64
		cancelled atomic.Int64
		started   atomic.Int64
		hooks     sync.Map // grant count -> func() run while that holder holds
	)
	type waiter struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	start := func(e *lock.Engine, typ lock.Type, id string) waiter {
		ctx, cancel := context.WithCancel(context.Background())
		w := waiter{cancel: cancel, done: make(chan struct{})}
		started.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(w.done)
			g, err := e.Acquire(ctx, obj, typ, lock.AcquireOptions{Wait: 2 * time.Minute, RequestID: id})
			if err != nil {
				if ctx.Err() != nil {
					cancelled.Add(1)
					return
				}
				t.Errorf("%s: %v", id, err)
				return
			}
			chk.enter(g.Token())
			ord.check(t, conn, objPath, g)
			n := granted.Add(1)
			if f, ok := hooks.LoadAndDelete(n); ok {
				f.(func())()
			}
			time.Sleep(time.Millisecond)
			chk.leave()
			if err := g.Release(context.Background()); err != nil {
				t.Errorf("release %s: %v", id, err)
			}
		}()
		return w
	}
	queued := func(n int) bool { return len(children(t, conn, root, obj)) >= n+1 } // and the sentinel

	// Phase 1: a's foreground waiters with two of b's among them, then
	// background waiters of both engines.
	var aFg []waiter
	for i := range 12 {
		aFg = append(aFg, start(a, lock.Foreground, fmt.Sprintf("afg%02d", i)))
		waitFor(t, time.Minute, "a's waiter queued", func() bool { return queued(int(started.Load()) + 1) })
	}
	for i := range 2 {
		start(b, lock.Foreground, fmt.Sprintf("bfg%02d", i))
		waitFor(t, time.Minute, "b's waiter queued", func() bool { return queued(int(started.Load()) + 1) })
	}
	for i := 12; i < 30; i++ {
		aFg = append(aFg, start(a, lock.Foreground, fmt.Sprintf("afg%02d", i)))
		waitFor(t, time.Minute, "a's waiter queued", func() bool { return queued(int(started.Load()) + 1) })
	}
	for i := range 3 {
		start(a, lock.Background, fmt.Sprintf("abg%02d", i))
		start(b, lock.Background, fmt.Sprintf("bbg%02d", i))
	}
	waitFor(t, time.Minute, "every waiter queued", func() bool { return queued(int(started.Load()) + 1) })
	waitFor(t, time.Minute, "every waiter waiting", func() bool {
		return a.Health().Waiting+b.Health().Waiting >= int(started.Load())
	})
	time.Sleep(200 * time.Millisecond) // a's listing of the arrivals

	// Phase 2, while the 5th holder holds: four of a's later foreground
	// waiters give up (each in the names some holder hands on); those
	// behind them list again (a's listing is fresh after this).
	hooks.Store(int64(5), func() {
		for _, w := range aFg[20:24] {
			w.cancel()
		}
		for _, w := range aFg[20:24] {
			<-w.done
		}
	})
	// Phase 3, while the 12th holder holds: b's foreground waiters arrive
	// (a lists nothing after this: its holders hand on from a listing
	// without them, whose foreground part ends with a's afg29 and is
	// followed by the background waiters), then the early set is taken.
	hooks.Store(int64(12), func() {
		for i := 2; i < 8; i++ {
			start(b, lock.Foreground, fmt.Sprintf("bfg%02d", i))
		}
		if !pollFor(time.Minute, func() bool {
			k, _, err := conn.Children(objPath)
			return err == nil && len(k) >= int(started.Load()-granted.Load()-cancelled.Load())+2
		}) {
			t.Error("b's mid-drain waiters never queued")
		}
		k, _, _ := conn.Children(objPath)
		ord.setEarly(k)
	})
	chk.leave()
	release(t, gate)

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("drain stuck: %d granted, %d cancelled of %d", granted.Load(), cancelled.Load(), started.Load())
	}
	if g, c, s := granted.Load(), cancelled.Load(), started.Load(); g+c != s {
		t.Errorf("%d granted + %d cancelled, %d waiters", g, c, s)
	}
	chk.verify(t, int(granted.Load())+1)
	ord.mu.Lock()
	defer ord.mu.Unlock()
	if len(ord.passed) > 0 {
		t.Errorf("waiters passed over (%d): %v", len(ord.passed), ord.passed)
	}
	t.Logf("granted %d, cancelled %d, local handoffs a=%d b=%d", granted.Load(), cancelled.Load(), a.LocalHandoffs(), b.LocalHandoffs())
}

// lnHeld is a waiter's grant, held until the test closes hold.
type lnHeld struct {
	id   string
	g    *lock.Grant
	hold chan struct{}
}

// lnQueue starts n waiters of e on obj (request ids prefix00...), each
// holding its grant until told; grants are sent on the returned channel
// (a nil grant: its error was reported).
func lnQueue(t *testing.T, e *lock.Engine, obj, prefix string, n int, shared bool) <-chan lnHeld {
	ch := make(chan lnHeld, n)
	for i := range n {
		go func() {
			id := fmt.Sprintf("%s%02d", prefix, i)
			g, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: time.Minute, RequestID: id, Shared: shared})
			if err != nil {
				t.Errorf("%s on %s: %v", id, obj, err)
				ch <- lnHeld{id: id}
				return
			}
			h := lnHeld{id: id, g: g, hold: make(chan struct{})}
			ch <- h
			<-h.hold
			if err := g.Release(context.Background()); err != nil {
				t.Errorf("release %s: %v", id, err)
			}
		}()
	}
	return ch
}

// TestReviewLnextRemoteSuccessorKeepsNames: request ids are the caller's
// (the same ones on two objects and two engines), yet a release naming
// another engine's waiter is not taken for a local handoff. On object 1,
// a's waiter a0 is first, then b's 20 waiters, then a's a1; on object 2,
// a's 20 waiters under the very ids b's wait under on object 1. a0's
// release to b's first waiter hands on every name behind it (20, not 8);
// the local handoffs hand on 8 where the engine's listing holds the names
// dropped (a to a on object 2), and every name where it does not (b to b
// on object 1: b's listing lacks a1). Both drains are in order, never two holders, tokens rising.
// Catches the cut applied to remote successors too (allLocal dropped), and
// an id collision fooling allLocal (the native suffix on caller ids
// removed in Acquire). Either costs only the remote engine's topUp (its
// listing may not reach as far), not order or safety: any head of the
// names is a correct queue (TestReviewLnextMixedDrainOrder).
func TestReviewLnextRemoteSuccessorKeepsNames(t *testing.T) {
	const n = 20
	root := testRoot(t, zkServer)
	a := newEngine(t, zkServer.Servers(), root, native)
	b := newEngine(t, zkServer.Servers(), root, native)
	conn := rawConn(t, zkServer.Servers())
	objs := []string{"lnext-ids-1", "lnext-ids-2"}
	gate1 := acquire(t, a, objs[0], lock.Foreground, lock.AcquireOptions{})
	gate2 := acquire(t, a, objs[1], lock.Foreground, lock.AcquireOptions{})
	q0 := lnQueue(t, a, objs[0], "a", 1, false)
	waitFor(t, time.Minute, "a0 queued", func() bool { return len(children(t, conn, root, objs[0])) >= 3 }) // the sentinel, the gate, a0
	q1 := lnQueue(t, b, objs[0], "dup", n, false)                                                           // remote to a
	waitFor(t, time.Minute, "b's waiters queued", func() bool { return len(children(t, conn, root, objs[0])) >= n+3 })
	// a1's view lists b's waiters for a (topUp's listing: a0 knows them all)
	q3 := lnQueue(t, a, objs[0], "z", 1, false)
	q2 := lnQueue(t, a, objs[1], "dup", n, false) // local to a, same caller ids
	waitFor(t, time.Minute, "every waiter queued", func() bool {
		return len(children(t, conn, root, objs[0])) >= n+4 && len(children(t, conn, root, objs[1])) >= n+2
	})
	waitFor(t, time.Minute, "every waiter waiting", func() bool { return a.Health().Waiting >= n+2 && b.Health().Waiting >= n })
	time.Sleep(200 * time.Millisecond) // the engines' listings of the arrivals

	// drain releases gate and takes the grants of q in turn; names checks
	// the names the release that granted each one wrote.
	drain := func(obj string, gate *lock.Grant, qs []<-chan lnHeld, names func(i, names int)) {
		var chk overlapChecker
		chk.enter(gate.Token())
		chk.leave()
		release(t, gate)
		var prev lnChild
		i := 0
		for _, q := range qs {
			for range cap(q) {
				h := <-q
				if h.g == nil {
					t.FailNow()
				}
				chk.enter(h.g.Token())
				c, _ := lnParse(h.g.Node())
				if i > 0 && !prev.ahead(c) {
					t.Errorf("%s: %s granted after %s", obj, c.name, prev.name)
				}
				prev = c
				d, _ := readObj(t, conn, root, obj)
				if len(d.H) != 1 || d.H[0].R != h.g.RequestID() {
					t.Errorf("%s handoff %d: holders %+v, want %s", obj, i, d.H, h.g.RequestID())
				}
				names(i, len(d.N))
				chk.leave()
				close(h.hold)
				i++
			}
		}
		chk.verify(t, i+1)
	}
	// local: at least what waits behind, up to 8.
	local := func(obj string, from, total int) func(i, names int) {
		return func(i, names int) {
			want := min(8, total-1-i)
			if i >= from && (names < want || names > 8) {
				t.Errorf("%s local handoff %d wrote %d names, want %d..8", obj, i, names, want)
			}
		}
	}
	// On object 1 b's listing may not reach a1 (it came after b's waiters
	// listed; whether b lists again before the drain is timing): then b's
	// holders keep every name a0 handed on (a1 among them), else they cut
	// to 8 and top up from the listing (remark A of the review: cut to 8
	// without a1 in the listing, the last of b's holders listed the
	// object again; Engine.listed, TestNativeListedNames).
	l1 := func(i, names int) {
		if all := n + 2 - 1 - i; i >= 2 && names != all && (names < min(8, all) || names > 8) {
			t.Errorf("%s local handoff %d wrote %d names, want all %d behind it or %d..8", objs[0], i, names, all, min(8, all))
		}
	}
	drain(objs[0], gate1, []<-chan lnHeld{q0, q1, q3}, func(i, names int) {
		if i == 1 && names != n {
			t.Errorf("a's release to b's waiter wrote %d names, want all %d behind it", names, n)
		}
		l1(i, names)
	})
	drain(objs[1], gate2, []<-chan lnHeld{q2}, local(objs[1], 1, n))
}

// TestReviewLnextSharedLocalSuccessors: shared successors do not top up
// (only their listing knows shared waiters they pass). Behind a's gate:
// a's writer w0, three of a's readers, 20 of a's writers. w0's release
// names the three readers and hands on 8 names; the last reader to leave
// names the first writer from them, which tops up from the engine's
// listing: no holder lists (neither to learn arrivals nor before its
// release) from w0's grant until the next to last writer's, readers and
// writers never together, tokens rising, writers in order. Catches the
// local cut to 0 names (the readers then know of nobody: they follow
// arrivals with listings, and the last one lists before its release).
func TestReviewLnextSharedLocalSuccessors(t *testing.T) {
	const readers, writers = 3, 20
	root := testRoot(t, zkServer)
	a := newEngine(t, zkServer.Servers(), root, native)
	conn := rawConn(t, zkServer.Servers())
	const obj = "lnext-shared"
	queued := func(n int) func() bool { return func() bool { return len(children(t, conn, root, obj)) >= n+1 } } // and the sentinel
	gate := acquire(t, a, obj, lock.Foreground, lock.AcquireOptions{})
	w0q := lnQueue(t, a, obj, "v", 1, false)
	waitFor(t, time.Minute, "w0 queued", queued(2))
	rq := lnQueue(t, a, obj, "r", readers, true)
	waitFor(t, time.Minute, "readers queued", queued(readers+2))
	wq := lnQueue(t, a, obj, "w", writers, false)
	waitFor(t, time.Minute, "every waiter queued", queued(readers+writers+2))
	waitFor(t, time.Minute, "every waiter waiting", func() bool { return a.Health().Waiting >= readers+writers+1 })
	time.Sleep(200 * time.Millisecond) // a's listing of the arrivals
	lists := func() int64 { return a.LearnListings() + a.ReleaseListings() }

	var chk rwChecker
	chk.enter(false, gate.Token())
	chk.leave(false)
	release(t, gate)
	w0 := <-w0q
	if w0.g == nil {
		t.FailNow()
	}
	chk.enter(false, w0.g.Token())
	base := lists()
	chk.leave(false)
	close(w0.hold)
	var rs []lnHeld
	for range readers {
		h := <-rq
		if h.g == nil {
			t.FailNow()
		}
		chk.enter(true, h.g.Token())
		rs = append(rs, h)
	}
	d, _ := readObj(t, conn, root, obj)
	if len(d.H) != readers || len(d.N) != 8 {
		t.Errorf("release to %d local readers wrote %d holders and %d names, want %d and 8", readers, len(d.H), len(d.N), readers)
	}
	for _, h := range rs {
		chk.leave(true)
		close(h.hold)
	}
	lnWritersInOrder(t, &chk, slices.Repeat([]<-chan lnHeld{wq}, writers), func(i int) {
		if i == writers-2 {
			if got := lists() - base; got != 0 {
				t.Errorf("%d holders' listings in a local drain behind shared holders, want 0", got)
			}
		}
	})
	chk.mu.Lock()
	defer chk.mu.Unlock()
	if chk.violations != 0 || chk.badToken != 0 || chk.grants != readers+writers+2 {
		t.Errorf("violations %d, tokens not rising %d, grants %d of %d", chk.violations, chk.badToken, chk.grants, readers+writers+2)
	}
}

// TestReviewLnextMixedSharedSuccessors: a release naming two shared
// successors, one of this engine and one of another, hands on every name
// behind them, not 8 (the remote reader does not top up, and its engine's
// listing may not reach as far). Behind a's gate: a's writer a0, a's
// reader, b's reader, b's 20 writers, a's writer z (whose view lists b's
// waiters for a). Readers and writers never together, tokens rising,
// writers in order. Catches allLocal deciding on the first successor
// only.
func TestReviewLnextMixedSharedSuccessors(t *testing.T) {
	const writers = 20
	root := testRoot(t, zkServer)
	a := newEngine(t, zkServer.Servers(), root, native)
	b := newEngine(t, zkServer.Servers(), root, native)
	conn := rawConn(t, zkServer.Servers())
	const obj = "lnext-mixed-shared"
	queued := func(n int) func() bool { return func() bool { return len(children(t, conn, root, obj)) >= n+1 } } // and the sentinel
	gate := acquire(t, a, obj, lock.Foreground, lock.AcquireOptions{})
	a0q := lnQueue(t, a, obj, "v", 1, false)
	waitFor(t, time.Minute, "a0 queued", queued(2))
	raq := lnQueue(t, a, obj, "ra", 1, true)
	waitFor(t, time.Minute, "a's reader queued", queued(3))
	rbq := lnQueue(t, b, obj, "rb", 1, true)
	waitFor(t, time.Minute, "b's reader queued", queued(4))
	wq := lnQueue(t, b, obj, "w", writers, false)
	waitFor(t, time.Minute, "b's writers queued", queued(writers+4))
	zq := lnQueue(t, a, obj, "z", 1, false)
	waitFor(t, time.Minute, "every waiter queued", queued(writers+5))
	waitFor(t, time.Minute, "every waiter waiting", func() bool { return a.Health().Waiting >= 3 && b.Health().Waiting >= writers+1 })
	time.Sleep(200 * time.Millisecond) // the engines' listings of the arrivals

	var chk rwChecker
	chk.enter(false, gate.Token())
	chk.leave(false)
	release(t, gate)
	a0 := <-a0q
	if a0.g == nil {
		t.FailNow()
	}
	chk.enter(false, a0.g.Token())
	chk.leave(false)
	close(a0.hold)
	var rs []lnHeld
	for _, q := range []<-chan lnHeld{raq, rbq} {
		h := <-q
		if h.g == nil {
			t.FailNow()
		}
		chk.enter(true, h.g.Token())
		rs = append(rs, h)
	}
	d, _ := readObj(t, conn, root, obj)
	if len(d.H) != 2 || len(d.N) != writers+1 {
		t.Errorf("release to a local and a remote reader wrote %d holders and %d names, want 2 and %d", len(d.H), len(d.N), writers+1)
	}
	for _, h := range rs {
		chk.leave(true)
		close(h.hold)
	}
	lnWritersInOrder(t, &chk, append(slices.Repeat([]<-chan lnHeld{wq}, writers), zq), func(int) {})
	chk.mu.Lock()
	defer chk.mu.Unlock()
	if chk.violations != 0 || chk.badToken != 0 || chk.grants != writers+5 {
		t.Errorf("violations %d, tokens not rising %d, grants %d of %d", chk.violations, chk.badToken, chk.grants, writers+5)
	}
}

// lnWritersInOrder takes one writer's grant from each of qs in turn: each
// is alone under chk and after the one before in grant order; held(i) runs
// while the i-th holds.
func lnWritersInOrder(t *testing.T, chk *rwChecker, qs []<-chan lnHeld, held func(i int)) {
	var prev lnChild
	for i, q := range qs {
		h := <-q
		if h.g == nil {
			t.FailNow()
		}
		chk.enter(false, h.g.Token())
		c, _ := lnParse(h.g.Node())
		if i > 0 && !prev.ahead(c) {
			t.Errorf("writer %s granted after %s", c.name, prev.name)
		}
		prev = c
		held(i)
		chk.leave(false)
		close(h.hold)
	}
}
