package lock_test

// Review of the recipes (commit 4ca492c, issue 22 §2/§3): AcquireAll and
// AcquirePermit attacked against a real ZooKeeper.

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/testenv"
)

// staller is a dialer whose connections stop sending the requests about one
// path (the node or under it; a multi by its first operation's path) once
// a request about another path (trigger) has been written: they are
// swallowed, never reach the server and are never answered, while every
// other request (pings, the keeper's syncs on "/", other objects) goes
// through. This is ZooKeeper stalling on those requests for as long as the
// test wants, on a session that stays valid. lift stops it and drops the
// connections, so that the swallowed requests fail and the engine
// reconnects.
type staller struct {
	mu        sync.Mutex
	trigger   string
	stall     string
	stalling  bool
	swallowed int
	conns     []net.Conn
}

func under(p, prefix string) bool {
	return prefix != "" && (p == prefix || strings.HasPrefix(p, prefix+"/"))
}

func (s *staller) arm(trigger, stall string) {
	s.mu.Lock()
	s.trigger, s.stall, s.stalling, s.swallowed = trigger, stall, false, 0
	s.mu.Unlock()
}

func (s *staller) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.swallowed
}

func (s *staller) lift() {
	s.mu.Lock()
	s.trigger, s.stall, s.stalling = "", "", false
	cs := s.conns
	s.conns = nil
	s.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

func (s *staller) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.conns = append(s.conns, c)
	s.mu.Unlock()
	return &stallConn{Conn: c, s: s}, nil
}

type stallConn struct {
	net.Conn
	s      *staller
	frames int
}

func (c *stallConn) Write(p []byte) (int, error) {
	c.frames++
	if c.frames == 1 { // the connect request
		return c.Conn.Write(p)
	}
	s := c.s
	s.mu.Lock()
	_, pth, ok := requestPath(p)
	if ok && under(pth, s.trigger) {
		s.stalling = true
	}
	swallow := ok && s.stalling && under(pth, s.stall)
	if swallow {
		s.swallowed++
	}
	s.mu.Unlock()
	if swallow {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// waitReturn waits up to within for done; ok is false if it had not
// delivered by then (the caller then lifts the fault and reads it).
func waitReturn[T any](done <-chan T, within time.Duration) (T, bool) {
	select {
	case v := <-done:
		return v, true
	case <-time.After(within):
		var zero T
		return zero, false
	}
}

// AcquirePermit's wait bounds the call: a request that waits 500 ms returns
// (an InstanceLockError naming the semaphore) whatever ZooKeeper does with
// the requests about the permits. Here ZooKeeper stalls on every request
// about permit 0 from the moment the gate's holder first looks at it
// (freePermit's Inspect), on a session that stays valid. Before the fix,
// freePermit inspected the permits under the caller's ctx, not the
// deadline: AcquirePermit hung, holding the gate (blocking every other
// requester of the semaphore), until ZooKeeper answered — here 20 s, in
// general for as long as the stall lasts.
func TestReviewRecipesPermitWaitBoundedWhenZKStalls(t *testing.T) {
	root := testRoot(t, zkServer)
	st := &staller{}
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.Dialer = st.dial })
	_, slots, err := lock.SemaphoreObjects("s", 2)
	if err != nil {
		t.Fatal(err)
	}
	esc, _ := lock.EscapeObject(slots[0])
	permit0 := root + "/" + esc
	st.arm(permit0, permit0)
	type result struct {
		g   *lock.Grant
		err error
	}
	done := make(chan result, 1)
	go func() {
		g, err := e.AcquirePermit(context.Background(), "s", 2, lock.Foreground, lock.AcquireOptions{Wait: 500 * time.Millisecond})
		done <- result{g, err}
	}()
	r, returned := waitReturn(done, 20*time.Second)
	swallowed := st.count()
	st.lift()
	if !returned {
		r = <-done
	}
	if r.g != nil {
		release(t, r.g)
	}
	if swallowed == 0 {
		t.Fatalf("the stall never began (no request about the permits was sent): %v", r.err)
	}
	if !returned {
		t.Fatalf("AcquirePermit (wait 500 ms) had not returned 20 s later while ZooKeeper stalled on permit 0 (%d requests unanswered); it returned %v once the stall ended", swallowed, r.err)
	}
	var ile *lock.InstanceLockError
	if !errors.As(r.err, &ile) || ile.Object != lock.SemaphorePrefix+"s" {
		t.Errorf("AcquirePermit = %v, want an InstanceLockError naming the semaphore", r.err)
	}
}

// AcquireAll's wait bounds the call also when giving back what it took:
// {x, y} with y held elsewhere times out on y, and ZooKeeper stalls on
// every request about x from the moment the request for y is sent (so the
// release of x is never answered). Before the fix, giveBack released under
// a context without deadline and AcquireAll hung until ZooKeeper answered
// (here 20 s); Acquire itself bounds each of its clean-up steps (2 s) and
// Release completes in the background what it cannot finish.
func TestReviewRecipesAcquireAllGiveBackBoundedWhenZKStalls(t *testing.T) {
	root := testRoot(t, zkServer)
	st := &staller{}
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.Dialer = st.dial })
	other := newEngine(t, zkServer.Servers(), root)
	held := acquire(t, other, "y", lock.Foreground, lock.AcquireOptions{})
	defer release(t, held)
	st.arm(root+"/y", root+"/x")
	done := make(chan error, 1)
	go func() {
		gs, err := e.AcquireAll(context.Background(), []string{"x", "y"}, lock.Foreground, lock.AcquireOptions{Wait: 500 * time.Millisecond})
		for _, g := range gs {
			_ = g.Release(context.Background())
		}
		done <- err
	}()
	err, returned := waitReturn(done, 20*time.Second)
	swallowed := st.count()
	st.lift()
	if !returned {
		err = <-done
	}
	if swallowed == 0 {
		t.Fatalf("the stall never began: %v", err)
	}
	if !returned {
		t.Fatalf("AcquireAll (wait 500 ms) had not returned 20 s later while ZooKeeper stalled on the release of x (%d requests unanswered); it returned %v once the stall ended", swallowed, err)
	}
	var ile *lock.InstanceLockError
	if !errors.As(err, &ile) || ile.Object != "y" {
		t.Errorf("AcquireAll = %v, want an InstanceLockError naming y", err)
	}
	// x comes back (the release completes after the reconnect)
	waitFor(t, 20*time.Second, "x free again", func() bool {
		g, err := other.Acquire(context.Background(), "x", lock.Foreground, lock.AcquireOptions{TryOnce: true})
		if err != nil {
			return false
		}
		release(t, g)
		return true
	})
}

// Foreground before background at the gate: "requests queue on the
// semaphore's gate, a lock like any other, so foreground requests go before
// background ones". With a lock like any other, a foreground request that
// arrives while a background one waits is granted first. Here a semaphore
// of one permit is held; a background request B waits, then a foreground
// request F arrives; the permit is released. B is granted first: B holds
// the gate while it waits on the permits, so F queues behind B at the gate
// and never reaches the permit's queue, where its node would sort ahead.
// Fixed: a background holder of the gate watches the gate and, when a
// request sorting ahead of it queues there, stops waiting on the permits
// and queues at the gate again.
func TestReviewRecipesGateForegroundFirst(t *testing.T) {
	root := testRoot(t, zkServer)
	eh := newEngine(t, zkServer.Servers(), root)
	eb := newEngine(t, zkServer.Servers(), root)
	ef := newEngine(t, zkServer.Servers(), root)
	gate, slots, _ := lock.SemaphoreObjects("prio", 1)
	h, err := eh.AcquirePermit(context.Background(), "prio", 1, lock.Foreground, lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 2)
	var wg sync.WaitGroup
	run := func(e *lock.Engine, typ lock.Type, who string) {
		wg.Go(func() {
			g, err := e.AcquirePermit(context.Background(), "prio", 1, typ, lock.AcquireOptions{Wait: time.Minute})
			if err != nil {
				t.Errorf("%s: %v", who, err)
				order <- who + " failed"
				return
			}
			order <- who
			time.Sleep(50 * time.Millisecond)
			if err := g.Release(context.Background()); err != nil {
				t.Errorf("%s release: %v", who, err)
			}
		})
	}
	run(eb, lock.Background, "background")
	waitFor(t, 20*time.Second, "background waiting on the permit", func() bool {
		st, err := eh.Inspect(context.Background(), slots[0])
		return err == nil && len(st.Waiters) == 1
	})
	run(ef, lock.Foreground, "foreground")
	waitFor(t, 20*time.Second, "foreground queued", func() bool {
		st, err := eh.Inspect(context.Background(), gate)
		return err == nil && len(st.Waiters) == 1
	})
	release(t, h)
	first := <-order
	wg.Wait()
	if first != "foreground" {
		t.Errorf("%s was granted first: a foreground request waiting on the semaphore went after a background one that waited before it", first)
	}
}

// The error of a set that timed out reports the set's wait: the request
// waited its whole wait (3 s) for the set, not only the time since it
// reached the object it failed on. Before the fix AcquireAll returned the
// last Acquire's error unchanged (Waited ≈ 1.5 s here, the time spent on
// y after x came free), while AcquirePermit rewrites Waited to its own.
func TestReviewRecipesAcquireAllWaitedIsTheSetsWait(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root)
	other := newEngine(t, zkServer.Servers(), root)
	hx := acquire(t, other, "x", lock.Foreground, lock.AcquireOptions{})
	hy := acquire(t, other, "y", lock.Foreground, lock.AcquireOptions{})
	defer release(t, hy)
	const wait = 3 * time.Second
	go func() {
		time.Sleep(wait / 2)
		_ = hx.Release(context.Background())
	}()
	_, err := e.AcquireAll(context.Background(), []string{"x", "y"}, lock.Foreground, lock.AcquireOptions{Wait: wait})
	var ile *lock.InstanceLockError
	if !errors.As(err, &ile) || ile.Object != "y" {
		t.Fatalf("AcquireAll = %v, want an InstanceLockError naming y", err)
	}
	if ile.Waited < wait {
		t.Errorf("the error says the set waited %v; it waited its whole wait %v: %v", ile.Waited, wait, ile)
	}
}

// A request that times out at the gate names who holds the semaphore: the
// holder of a permit, and its place among the semaphore's waiters. Here
// the permit is held by "holder", waiter W1 holds the gate while it waits
// on the permit, and W2 times out at the gate. Before the fix W2's error
// said the semaphore was "held by" W1's gate node (info "w1", a waiter)
// at position 1 (next in line), though W1 is ahead of it.
func TestReviewRecipesGateTimeoutNamesPermitHolder(t *testing.T) {
	root := testRoot(t, zkServer)
	e0 := newEngine(t, zkServer.Servers(), root)
	e1 := newEngine(t, zkServer.Servers(), root)
	e2 := newEngine(t, zkServer.Servers(), root)
	gate, slots, _ := lock.SemaphoreObjects("named", 1)
	h, err := e0.AcquirePermit(context.Background(), "named", 1, lock.Foreground, lock.AcquireOptions{Info: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w1 := make(chan error, 1)
	go func() {
		g, err := e1.AcquirePermit(ctx, "named", 1, lock.Foreground, lock.AcquireOptions{Info: "w1", Wait: time.Minute})
		if g != nil {
			_ = g.Release(context.Background())
		}
		w1 <- err
	}()
	waitFor(t, 20*time.Second, "w1 waiting on the permit", func() bool {
		st, err := e0.Inspect(context.Background(), slots[0])
		return err == nil && len(st.Waiters) == 1
	})
	_, err = e2.AcquirePermit(context.Background(), "named", 1, lock.Foreground, lock.AcquireOptions{Info: "w2", Wait: 300 * time.Millisecond})
	cancel()
	<-w1
	release(t, h)
	var ile *lock.InstanceLockError
	if !errors.As(err, &ile) || ile.Object != lock.SemaphorePrefix+"named" {
		t.Fatalf("w2 = %v, want an InstanceLockError naming the semaphore", err)
	}
	if ile.Holder == nil || ile.Holder.Info != "holder" {
		info := "<nil>"
		if ile.Holder != nil {
			info = ile.Holder.Info
		}
		t.Errorf("w2's error names holder info %q (the gate %s's holder), want the permit holder %q: %v", info, gate, "holder", ile)
	}
	if ile.Position != 2 {
		t.Errorf("w2's error says position %d, want 2 (w1 waits ahead of it): %v", ile.Position, ile)
	}
}

// Grants that race the winner in firstPermit are given back: a waiter
// waits on every permit of four while all four are held; all four are
// released at once, so several of its waits can be granted together. It
// keeps one, and the other three are free again (another engine takes each
// with try-once), every round.
func TestReviewRecipesRacedGrantsGivenBack(t *testing.T) {
	root := testRoot(t, zkServer)
	e0 := newEngine(t, zkServer.Servers(), root)
	e1 := newEngine(t, zkServer.Servers(), root)
	const permits = 4
	_, slots, _ := lock.SemaphoreObjects("race", permits)
	for round := range 5 {
		var held []*lock.Grant
		for _, s := range slots {
			held = append(held, acquire(t, e0, s, lock.Foreground, lock.AcquireOptions{}))
		}
		type result struct {
			g   *lock.Grant
			err error
		}
		done := make(chan result, 1)
		go func() {
			g, err := e1.AcquirePermit(context.Background(), "race", permits, lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
			done <- result{g, err}
		}()
		waitFor(t, 20*time.Second, "the waiter queued on every permit", func() bool {
			for _, s := range slots {
				st, err := e0.Inspect(context.Background(), s)
				if err != nil || len(st.Waiters) != 1 {
					return false
				}
			}
			return true
		})
		var wg sync.WaitGroup
		for _, g := range held {
			wg.Go(func() { release(t, g) })
		}
		wg.Wait()
		r := <-done
		if r.err != nil {
			t.Fatalf("round %d: %v", round, r.err)
		}
		for _, s := range slots {
			if s == r.g.Object() {
				continue
			}
			waitFor(t, 10*time.Second, "permit "+s+" given back", func() bool {
				g, err := e0.Acquire(context.Background(), s, lock.Foreground, lock.AcquireOptions{TryOnce: true})
				if err != nil {
					return false
				}
				release(t, g)
				return true
			})
		}
		release(t, r.g)
	}
}

// Cancelling at every step leaves nothing behind: AcquirePermit and
// AcquireAll with their ctx cancelled after 0, 5, 10, ... 120 ms (through the
// gate, the look at the permits, the try-once and the wait on every
// permit; through each object of the set), while another engine keeps
// taking and giving back a permit and one object of the set. Every call
// returns (a grant is released), the semaphore and the objects are free
// afterwards, and testRoot finds no node left.
func TestReviewRecipesCancelEverywhere(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root)
	other := newEngine(t, zkServer.Servers(), root)
	const permits = 2
	gate, slots, _ := lock.SemaphoreObjects("cx", permits)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // churn: a permit and b are taken and given back
		for {
			select {
			case <-stop:
				return
			default:
			}
			if g, err := other.AcquirePermit(context.Background(), "cx", permits, lock.Background, lock.AcquireOptions{Wait: 10 * time.Second}); err == nil {
				time.Sleep(3 * time.Millisecond)
				_ = g.Release(context.Background())
			}
			if g, err := other.Acquire(context.Background(), "b", lock.Foreground, lock.AcquireOptions{Wait: 10 * time.Second}); err == nil {
				time.Sleep(3 * time.Millisecond)
				_ = g.Release(context.Background())
			}
		}
	})
	hold := acquire(t, other, slots[1], lock.Foreground, lock.AcquireOptions{}) // one permit stays held: firstPermit runs too
	granted, cancelled := 0, 0
	for i := range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Duration(i/2)*5*time.Millisecond, cancel)
		if i%2 == 0 {
			g, err := e.AcquirePermit(ctx, "cx", permits, lock.Foreground, lock.AcquireOptions{Wait: 10 * time.Second})
			if err == nil {
				granted++
				_ = g.Release(context.Background())
			} else {
				cancelled++
			}
		} else {
			gs, err := e.AcquireAll(ctx, []string{"a", "b", "c"}, lock.Foreground, lock.AcquireOptions{Wait: 10 * time.Second})
			if err == nil {
				granted++
				for _, g := range gs {
					_ = g.Release(context.Background())
				}
			} else {
				cancelled++
			}
		}
		cancel()
	}
	close(stop)
	wg.Wait()
	release(t, hold)
	t.Logf("granted %d, cancelled %d", granted, cancelled)
	if cancelled == 0 || granted == 0 {
		t.Errorf("granted %d, cancelled %d: the cancels did not fall across the calls", granted, cancelled)
	}
	waitFor(t, 20*time.Second, "cleanups done", func() bool { return e.Health().CleanupPending == 0 })
	for _, obj := range append([]string{gate, "a", "b", "c"}, slots...) {
		waitFor(t, 10*time.Second, obj+" free", func() bool {
			g, err := other.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{TryOnce: true})
			if err != nil {
				return false
			}
			release(t, g)
			return true
		})
	}
}

// Never more than N holders while connections are cut with the permit
// waits in flight: one engine of three has its connection cut right after
// a create or a multi (applied, reply lost; reconnects refused for 300 ms,
// far below the session timeout) again and again, while six workers take
// and give back permits of a semaphore of 2. At most 2 hold at once, each
// permit's tokens strictly increase, and nothing is left behind.
func TestReviewRecipesCutsDuringPermitWaits(t *testing.T) {
	t.Parallel()
	root := testRoot(t, zkServer)
	cd := newCutDialer()
	es := []*lock.Engine{
		newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.Dialer = cd.dial }),
		newEngine(t, zkServer.Servers(), root),
		newEngine(t, zkServer.Servers(), root),
	}
	// The workers go on until the cutter has cut enough times (at most a
	// minute): a fixed number of rounds finished before five cuts on a
	// loaded machine.
	const permits, workers, minRounds, wantCuts = 2, 6, 6, 5
	var ncuts atomic.Int32
	enough := make(chan struct{})
	var mu sync.Mutex
	inside, over, bad, grants, failed := 0, 0, 0, 0, 0
	last := map[string]int64{}
	stop := make(chan struct{})
	var cuts sync.WaitGroup
	cuts.Go(func() {
		ops := []int32{opCreate, opMulti}
		giveUp := time.After(time.Minute)
		for i := 0; ; i++ {
			done := cd.arm(ops[i%2], 300*time.Millisecond)
			select {
			case <-stop:
				return
			case <-done:
				if ncuts.Add(1) == wantCuts {
					close(enough)
				}
				time.Sleep(400 * time.Millisecond) // let the engine recover and grant between cuts
			case <-time.After(time.Second):
			case <-giveUp:
				if ncuts.Load() < wantCuts {
					close(enough)
				}
				giveUp = nil
			}
		}
	})
	var wg sync.WaitGroup
	for w := range workers {
		e := es[w%len(es)]
		wg.Go(func() {
			for r := 0; ; r++ {
				if r >= minRounds {
					select {
					case <-enough:
						return
					default:
					}
				}
				g, err := e.AcquirePermit(context.Background(), "cut", permits, lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
				if err != nil {
					mu.Lock()
					if failed++; failed <= 3 {
						t.Logf("worker %d: %v", w, err)
					}
					mu.Unlock()
					continue
				}
				mu.Lock()
				inside++
				grants++
				if inside > permits {
					over++
				}
				if g.Token() <= last[g.Object()] {
					bad++
				}
				last[g.Object()] = g.Token()
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				mu.Lock()
				inside--
				mu.Unlock()
				_ = g.Release(context.Background())
			}
		})
	}
	wg.Wait()
	close(stop)
	cuts.Wait()
	cd.arm(0, 0)
	cd.heal()
	t.Logf("grants %d, failed %d, cuts %d", grants, failed, ncuts.Load())
	if n := ncuts.Load(); n < wantCuts {
		t.Errorf("only %d cuts in a minute: the test did not cut much", n)
	}
	if over != 0 || bad != 0 {
		t.Fatalf("more than %d holders %d times; non-increasing permit tokens %d", permits, over, bad)
	}
	if grants < (grants+failed)/2 || grants < workers*minRounds/2 {
		t.Errorf("only %d of %d acquires granted", grants, grants+failed)
	}
	waitFor(t, 20*time.Second, "cleanups done", func() bool { return es[0].Health().CleanupPending == 0 })
}

// writeFailer is a dialer whose connection breaks while the client writes
// the first request about one path (armed): the request is not sent, the
// write fails with the socket's error (here "use of closed network
// connection"; a peer's reset gives "broken pipe"), as a connection that
// dies between two requests does. Reconnects are accepted at once.
type writeFailer struct {
	mu     sync.Mutex
	prefix string
	failed int
}

func (w *writeFailer) arm(prefix string) {
	w.mu.Lock()
	w.prefix, w.failed = prefix, 0
	w.mu.Unlock()
}

func (w *writeFailer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &failConn{Conn: c, w: w}, nil
}

type failConn struct {
	net.Conn
	w      *writeFailer
	frames int
}

func (c *failConn) Write(p []byte) (int, error) {
	c.frames++
	if c.frames > 1 {
		w := c.w
		w.mu.Lock()
		_, pth, ok := requestPath(p)
		hit := ok && under(pth, w.prefix)
		if hit {
			w.prefix = ""
			w.failed++
		}
		w.mu.Unlock()
		if hit {
			c.Conn.Close()
			return c.Conn.Write(p)
		}
	}
	return c.Conn.Write(p)
}

// A connection that breaks while a request is being written is a lost
// connection like any other: the acquire waits for the reconnect and goes
// on within its wait. Found by TestReviewRecipesCutsDuringPermitWaits (the
// gate's acquire failed with `lock: acquire ".semaphore/cut/gate": write
// tcp ...: use of closed network connection` with 19 s of its wait left):
// go-zookeeper hands a request whose write failed the socket's error, not
// ErrConnectionClosed, and the engine took it for a final error. Here the
// first request about b of an AcquireAll{a, b} fails to be written; the
// set must still be granted.
func TestReviewRecipesWriteErrorIsALostConnection(t *testing.T) {
	root := testRoot(t, zkServer)
	wf := &writeFailer{}
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.Dialer = wf.dial })
	wf.arm(root + "/b")
	gs, err := e.AcquireAll(context.Background(), []string{"a", "b"}, lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
	wf.mu.Lock()
	failed := wf.failed
	wf.mu.Unlock()
	if failed != 1 {
		t.Fatalf("%d writes failed, want 1 (AcquireAll: %v)", failed, err)
	}
	if err != nil {
		t.Fatalf("AcquireAll after a failed write = %v, want the set granted within its wait", err)
	}
	for _, g := range gs {
		release(t, g)
	}
}

// A permit whose holder's sidecar died comes back only after the validity
// that holder was told: e1 holds the only permit, e2 waits for it (holding
// the gate), and e1 is cut off from ZooKeeper (black hole: as a killed
// sidecar, it sends nothing more). e2's grant comes after e1's
// ValidUntil, both on this machine's monotonic clock. A third engine, e3,
// also cut off while it waits at the gate, has its session expire mid-wait:
// its AcquirePermit fails and takes nothing (it fails when its wait runs
// out, as an InstanceLockError: an engine with waiters but no grant does
// not declare its session lost while it cannot reach ZooKeeper).
func TestReviewRecipesDeadHolderPermitAfterValidity(t *testing.T) {
	t.Parallel()
	root := testRoot(t, zkServer)
	p1 := testenv.ProxyT(t, zkServer.Addr(1))
	p3 := testenv.ProxyT(t, zkServer.Addr(1))
	short := func(o *lock.Options) { o.SessionTimeout = 2 * time.Second }
	e1 := newEngine(t, []string{p1.Addr()}, root, short)
	e2 := newEngine(t, zkServer.Servers(), root)
	e3 := newEngine(t, []string{p3.Addr()}, root, short)
	gate, slots, _ := lock.SemaphoreObjects("dead", 1)
	g1, err := e1.AcquirePermit(context.Background(), "dead", 1, lock.Foreground, lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		g   *lock.Grant
		err error
	}
	r2, r3 := make(chan result, 1), make(chan result, 1)
	go func() {
		g, err := e2.AcquirePermit(context.Background(), "dead", 1, lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
		r2 <- result{g, err}
	}()
	waitFor(t, 20*time.Second, "e2 waiting on the permit", func() bool {
		st, err := e2.Inspect(context.Background(), slots[0])
		return err == nil && len(st.Waiters) == 1
	})
	go func() {
		g, err := e3.AcquirePermit(context.Background(), "dead", 1, lock.Foreground, lock.AcquireOptions{Wait: 8 * time.Second})
		r3 <- result{g, err}
	}()
	waitFor(t, 20*time.Second, "e3 waiting at the gate", func() bool {
		st, err := e2.Inspect(context.Background(), gate)
		return err == nil && len(st.Waiters) == 1
	})
	p1.BlackHole()
	p3.BlackHole()
	time.Sleep(300 * time.Millisecond) // replies already past the proxy are read; nothing moves the deadline after
	valid := g1.ValidUntil()
	if valid.IsZero() {
		t.Fatal("g1 ended before its holder was cut off")
	}
	res := <-r2
	if res.err != nil {
		t.Fatalf("e2: %v", res.err)
	}
	t.Logf("e2 granted %v after e1's validity ended", res.g.AcquiredAt().Sub(valid).Round(time.Millisecond))
	if !res.g.AcquiredAt().After(valid) {
		t.Errorf("e2 was granted the permit %v before the validity e1 was told (ValidUntil) ended", valid.Sub(res.g.AcquiredAt()))
	}
	if g1.State() != lock.Lost {
		t.Errorf("e1's grant is %v after e2 was granted, want lost", g1.State())
	}
	release(t, res.g)
	cut := time.Now()
	r := <-r3
	t.Logf("e3 returned %v after e2's grant: %v", time.Since(cut).Round(time.Millisecond), r.err)
	if r.err == nil {
		t.Errorf("e3, cut off past its session timeout while it waited, was granted %s", r.g.Object())
		_ = r.g.Release(context.Background())
	}
	for _, p := range []*testenv.Proxy{p1, p3} {
		p.Heal()
		p.ResetConnections()
	}
	waitFor(t, 20*time.Second, "e1 and e3 reconnected", func() bool { return e1.Health().Connected && e3.Health().Connected })
}

// PermitIndex recognises exactly the objects SemaphoreObjects names: before
// the fix it took any ".semaphore/..." name ending in "/permit-" and
// something strconv.Atoi accepts, so plain objects such as
// ".semaphore/a/permit-01", ".semaphore/a/permit-+1" and
// ".semaphore/a/b/permit-1" (no semaphore's name has a '/') passed for
// permit 1 (of a semaphore's holder, say, in a listing).
func TestReviewRecipesPermitIndexExact(t *testing.T) {
	_, slots, _ := lock.SemaphoreObjects("a", 12)
	for i, s := range slots {
		if n, ok := lock.PermitIndex(s); !ok || n != i {
			t.Errorf("PermitIndex(%q) = %d, %v; want %d, true", s, n, ok, i)
		}
	}
	for _, obj := range []string{".semaphore/a/permit-01", ".semaphore/a/permit-+1", ".semaphore/a/b/permit-1",
		".semaphore//permit-1", ".semaphore/a/permit-", "x/permit-1", ".semaphore/a/gate"} {
		if n, ok := lock.PermitIndex(obj); ok {
			t.Errorf("PermitIndex(%q) = %d, true; it is no semaphore's permit", obj, n)
		}
	}
}

// Closing the engine ends its recipes in progress: an AcquirePermit waiting
// on every permit (all held elsewhere) and an AcquireAll waiting on its
// second object return with an error (ErrClosed underneath) as soon as
// Close has returned, and nothing is left behind.
func TestReviewRecipesCloseEndsWaits(t *testing.T) {
	root := testRoot(t, zkServer)
	e0 := newEngine(t, zkServer.Servers(), root)
	e1 := newEngine(t, zkServer.Servers(), root)
	const permits = 3
	_, slots, _ := lock.SemaphoreObjects("close", permits)
	var held []*lock.Grant
	for _, s := range append(slots, "y") {
		held = append(held, acquire(t, e0, s, lock.Foreground, lock.AcquireOptions{}))
	}
	errs := make(chan error, 2)
	go func() {
		g, err := e1.AcquirePermit(context.Background(), "close", permits, lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
		if g != nil {
			_ = g.Release(context.Background())
		}
		errs <- err
	}()
	go func() {
		gs, err := e1.AcquireAll(context.Background(), []string{"x", "y"}, lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
		for _, g := range gs {
			_ = g.Release(context.Background())
		}
		errs <- err
	}()
	waitFor(t, 20*time.Second, "both waiting", func() bool {
		for _, s := range append(slots, "y") {
			st, err := e0.Inspect(context.Background(), s)
			if err != nil || len(st.Waiters) != 1 {
				return false
			}
		}
		return true
	})
	e1.Close()
	for range 2 {
		err, ok := waitReturn(errs, 10*time.Second)
		if !ok {
			t.Fatal("a recipe was still waiting 10 s after Close returned")
		}
		if err == nil {
			t.Error("a recipe was granted after Close")
		} else if !errors.Is(err, lock.ErrClosed) {
			t.Errorf("recipe after Close = %v, want an error wrapping ErrClosed", err)
		}
	}
	for _, g := range held {
		release(t, g)
	}
}

// A set is granted only when all its objects are held (issue 22 §3): a
// grant of the set lost while the request waits for a later object is not
// returned as part of a granted set. Here x is taken, then, while the
// request waits for y, x's privateLock is deleted by someone else (an
// operator, a forced revoke): x's grant is lost, and the foreign actor takes
// x. When y comes free, AcquireAll returned {x, y} with x already lost
// (Err set, another holder on x) before the fix; now it gives the set back
// and takes it again, in canonical order, within the wait.
func TestReviewRecipesAcquireAllNoLostGrantInSet(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root)
	other := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())
	hy := acquire(t, other, "y", lock.Foreground, lock.AcquireOptions{})
	type result struct {
		gs  []*lock.Grant
		err error
	}
	done := make(chan result, 1)
	go func() {
		gs, err := e.AcquireAll(context.Background(), []string{"x", "y"}, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
		done <- result{gs, err}
	}()
	waitFor(t, 20*time.Second, "x held by the set, y waited for", func() bool {
		sx, err1 := other.Inspect(context.Background(), "x")
		sy, err2 := other.Inspect(context.Background(), "y")
		return err1 == nil && err2 == nil && sx.Holder != nil && len(sy.Waiters) == 1
	})
	time.Sleep(100 * time.Millisecond) // x's holder watch is armed (HolderWatchDelay 25 ms)
	if err := conn.Delete(root+"/x/privateLock", -1); err != nil {
		t.Fatalf("delete x's privateLock: %v", err)
	}
	// the foreign actor takes x for a while
	hx := acquire(t, other, "x", lock.Foreground, lock.AcquireOptions{})
	release(t, hy)
	time.Sleep(200 * time.Millisecond)
	release(t, hx)
	r := <-done
	if r.err != nil {
		t.Fatalf("AcquireAll = %v, want the set granted once x and y are free", r.err)
	}
	for _, g := range r.gs {
		if g.Err() != nil {
			t.Errorf("AcquireAll returned %s already lost (%v): the set was not held when granted", g.Object(), g.Err())
		}
	}
	for _, g := range r.gs {
		_ = g.Release(context.Background())
	}
}
