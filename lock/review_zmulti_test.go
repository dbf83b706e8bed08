package lock_test

// Review of 8cd0531: a lock's multis (plugin fast path and grant, native
// fast path and take, both releases) go through the patched go-zookeeper's
// Conn.MultiCtx on the caller's goroutine (zmulti, boundedMulti) instead of
// zcall's worker. MultiCtx returns ctx's error as soon as ctx ends without
// an answer and then calls late once: with the answer, or with
// zk.ErrNotSent when the request was never handed to the connection.
//
// Faults: zmFaults is a dialer whose connections can stall their writes
// (go-zookeeper's send loop blocks in Write, as behind a stalled server's
// full socket buffers, and its 16-slot send queue fills: the next request
// is never handed to the connection) or fail a multi's write with a given
// error; the proxy black-holes answers or cuts connections; a ZooKeeper of
// its own is stopped (SIGSTOP).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/testenv"
)

// zmFaults dials TCP connections whose writes it can stall or fail.
type zmFaults struct {
	mu        sync.Mutex
	stall     chan struct{} // non-nil: writes block until it is closed
	blocked   chan struct{} // a write blocked on stall
	failMulti int           // fail this many multi writes with failErr
	stallMult bool          // with stall: only a multi's write blocks (and what queues behind it)
	stalledMs int           // multis whose write blocked on a stall
	failErr   error
	failed    int
}

func newZmFaults() *zmFaults { return &zmFaults{blocked: make(chan struct{}, 1)} }

func (f *zmFaults) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &zmConn{Conn: c, f: f, closed: make(chan struct{})}, nil
}

// armFailMulti makes the next n multis' writes fail with err (nothing
// written: go-zookeeper hands err to the request and drops the connection).
func (f *zmFaults) armFailMulti(n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failMulti, f.failErr = n, err
}

func (f *zmFaults) failedMultis() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// setStallMultis stalls (on) the next multi's write, and what queues
// behind it, or lifts the stall.
func (f *zmFaults) setStallMultis(on bool) {
	f.mu.Lock()
	f.stallMult = on
	f.mu.Unlock()
	f.setStall(on)
}

func (f *zmFaults) setStall(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case on && f.stall == nil:
		f.stall = make(chan struct{})
	case !on && f.stall != nil:
		close(f.stall)
		f.stall = nil
	}
}

type zmConn struct {
	net.Conn
	f      *zmFaults
	once   sync.Once
	closed chan struct{}
	wdl    atomic.Pointer[time.Time] // write deadline: a stalled write times out at it
}

func (c *zmConn) SetWriteDeadline(t time.Time) error {
	c.wdl.Store(&t)
	return c.Conn.SetWriteDeadline(t)
}

func (c *zmConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// isMultiPacket: a request packet (length, xid > 0, opcode) of a multi (14).
func isMultiPacket(p []byte) bool {
	return len(p) >= 12 && int32(binary.BigEndian.Uint32(p[4:8])) > 0 && binary.BigEndian.Uint32(p[8:12]) == 14
}

func (c *zmConn) Write(p []byte) (int, error) {
	f := c.f
	f.mu.Lock()
	st := f.stall
	if f.stallMult && !isMultiPacket(p) {
		st = nil
	}
	if st != nil && isMultiPacket(p) {
		f.stalledMs++
	}
	fail := f.failMulti > 0 && isMultiPacket(p)
	if fail {
		f.failMulti--
		f.failed++
	}
	ferr := f.failErr
	f.mu.Unlock()
	if fail {
		return 0, ferr
	}
	if st != nil {
		select {
		case f.blocked <- struct{}{}:
		default:
		}
		var timeout <-chan time.Time
		if d := c.wdl.Load(); d != nil && !d.IsZero() {
			tm := time.NewTimer(time.Until(*d))
			defer tm.Stop()
			timeout = tm.C
		}
		select {
		case <-st:
		case <-c.closed:
			return 0, net.ErrClosed
		case <-timeout:
			return 0, &net.OpError{Op: "write", Net: "tcp", Err: os.ErrDeadlineExceeded}
		}
	}
	return c.Conn.Write(p)
}

// zmBase creates paths in order where missing; the last, the test's base,
// is deleted with its children when the test ends.
func zmBase(t *testing.T, check *zk.Conn, paths ...string) {
	t.Helper()
	for _, q := range paths {
		if _, err := check.Create(q, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	base := paths[len(paths)-1]
	t.Cleanup(func() {
		kids, _, _ := check.Children(base)
		for _, k := range kids {
			_ = check.Delete(base+"/"+k, -1)
		}
		_ = check.Delete(base, -1)
	})
}

// zmCleanObjects deletes the objects' nodes under root when the test ends
// (a native object's sentinel, privateLock, first).
func zmCleanObjects(t *testing.T, check *zk.Conn, root string, objects ...string) {
	for _, o := range objects {
		name, _ := lock.EscapeObject(o)
		t.Cleanup(func() {
			_ = check.Delete(path.Join(root, name, "privateLock"), -1)
			_ = check.Delete(path.Join(root, name), -1)
		})
	}
}

// zmConnect is a plain go-zookeeper client dialing through f.
func zmConnect(t *testing.T, servers []string, f *zmFaults) *zk.Conn {
	t.Helper()
	return testenv.ClientWith(t, servers, 8*time.Second, f.dial)
}

// lateRec records the calls of a late (orphan) function.
type lateRec struct {
	mu    sync.Mutex
	calls []error
	ch    chan error
}

func newLateRec() *lateRec { return &lateRec{ch: make(chan error, 8)} }

func (l *lateRec) late(_ []zk.MultiResponse, err error) {
	l.mu.Lock()
	l.calls = append(l.calls, err)
	l.mu.Unlock()
	select {
	case l.ch <- err:
	default:
	}
}

func (l *lateRec) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

// first waits up to d for the first call.
func (l *lateRec) first(t *testing.T, d time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-l.ch:
		return err
	case <-time.After(d):
		t.Fatalf("%s: late function not called within %v", what, d)
		return nil
	}
}

// once checks, a moment later, that late was called exactly once.
func (l *lateRec) once(t *testing.T, what string) {
	t.Helper()
	time.Sleep(150 * time.Millisecond)
	if n := l.count(); n != 1 {
		t.Errorf("%s: late function called %d times, want 1", what, n)
	}
}

// zmStall stalls conn's writes and waits until one is blocked (a request
// of its own sent to make sure). The returned function lifts the stall and
// waits for that request.
func zmStall(t *testing.T, f *zmFaults, conn *zk.Conn) (lift func()) {
	t.Helper()
	f.setStall(true)
	select { // drop a stale signal
	case <-f.blocked:
	default:
	}
	var wg sync.WaitGroup
	wg.Go(func() { _, _, _ = conn.Exists("/") })
	select {
	case <-f.blocked:
	case <-time.After(10 * time.Second):
		f.setStall(false)
		t.Fatal("no write blocked on the stall")
	}
	var once sync.Once
	lift = func() {
		once.Do(func() {
			f.setStall(false)
			wg.Wait()
		})
	}
	t.Cleanup(lift)
	return lift
}

// zmFill fills conn's send queue (its writes stalled): requests of its own
// until a probe multi is refused (zk.ErrNotSent). It returns a function
// that waits for them (after the stall is lifted).
func zmFill(t *testing.T, conn *zk.Conn) (wait func()) {
	t.Helper()
	var wg sync.WaitGroup
	for range 24 {
		wg.Go(func() { _, _, _ = conn.Exists("/") })
	}
	for i := 0; ; i++ {
		if i == 200 {
			t.Fatal("the send queue never filled")
		}
		l := newLateRec()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := conn.MultiCtx(ctx, l.late, &zk.CheckVersionRequest{Path: "/", Version: -1})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("probe multi with writes stalled: %v, want the deadline", err)
		}
		select {
		case err := <-l.ch:
			if errors.Is(err, zk.ErrNotSent) {
				t.Cleanup(wg.Wait)
				return wg.Wait
			}
			t.Fatalf("probe's late function got %v with writes stalled", err)
		case <-time.After(50 * time.Millisecond): // queued: answered once the stall is lifted
		}
	}
}

// TestReviewZmultiContract checks MultiCtx against a real ZooKeeper at
// every point a context can end: before the call, with the send queue
// full, after the request was handed to the connection (its write
// stalled), with the answer lost to a black hole and then a cut; and the
// late function is never called when MultiCtx returns an answer.
func TestReviewZmultiContract(t *testing.T) {
	p := testenv.ProxyT(t, zkServer.Addr(1))
	f := newZmFaults()
	conn := zmConnect(t, []string{p.Addr()}, f)
	check := rawConn(t, zkServer.Servers())
	base := "/zmulti-" + nonWord.ReplaceAllString(t.Name(), "_")
	zmBase(t, check, base)
	create := func(name string) any {
		return &zk.CreateRequest{Path: base + "/" + name, Acl: zk.WorldACL(zk.PermAll)}
	}
	exists := func(t *testing.T, name string) bool {
		t.Helper()
		// a round trip of conn first: whatever it sent before is applied
		if _, err := conn.Sync(base); err != nil {
			t.Fatalf("sync: %v", err)
		}
		ok, _, err := check.Exists(base + "/" + name)
		if err != nil {
			t.Fatalf("exists %s: %v", name, err)
		}
		return ok
	}

	t.Run("answered", func(t *testing.T) {
		l := newLateRec()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := conn.MultiCtx(ctx, l.late, create("answered")); err != nil {
			t.Fatalf("MultiCtx: %v", err)
		}
		_, err := conn.MultiCtx(ctx, l.late, create("answered"))
		if !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("second MultiCtx: %v, want node exists", err)
		}
		time.Sleep(150 * time.Millisecond)
		if n := l.count(); n != 0 {
			t.Fatalf("late called %d times for answered multis", n)
		}
	})

	t.Run("ended before", func(t *testing.T) {
		l := newLateRec()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := conn.MultiCtx(ctx, l.late, create("before"))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("MultiCtx: %v, want canceled", err)
		}
		if err := l.first(t, 5*time.Second, "ended before"); !errors.Is(err, zk.ErrNotSent) {
			t.Fatalf("late got %v, want ErrNotSent", err)
		}
		l.once(t, "ended before")
		if exists(t, "before") {
			t.Fatal("a multi whose context had ended was applied")
		}
	})

	t.Run("queue full", func(t *testing.T) {
		lift := zmStall(t, f, conn)
		wait := zmFill(t, conn)
		l := newLateRec()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := conn.MultiCtx(ctx, l.late, create("full"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("MultiCtx: %v, want the deadline", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("MultiCtx returned %v after its 100ms deadline with the queue full", d)
		}
		// told at once, while the queue is still full
		if err := l.first(t, 3*time.Second, "queue full"); !errors.Is(err, zk.ErrNotSent) {
			t.Fatalf("late got %v, want ErrNotSent", err)
		}
		lift()
		wait()
		if exists(t, "full") {
			t.Fatal("a multi reported not sent was applied")
		}
		l.once(t, "queue full")
	})

	t.Run("write stalled", func(t *testing.T) {
		f.setStall(true)
		l := newLateRec()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := conn.MultiCtx(ctx, l.late, create("stalled"))
		if !errors.Is(err, context.DeadlineExceeded) {
			f.setStall(false)
			t.Fatalf("MultiCtx: %v, want the deadline", err)
		}
		select {
		case err := <-l.ch:
			f.setStall(false)
			t.Fatalf("late called with %v before the request's answer", err)
		case <-time.After(200 * time.Millisecond):
		}
		f.setStall(false)
		if err := l.first(t, 10*time.Second, "write stalled"); err != nil {
			t.Fatalf("late got %v, want the multi's success", err)
		}
		l.once(t, "write stalled")
		if !exists(t, "stalled") {
			t.Fatal("late reported success, node missing")
		}
	})

	t.Run("answer lost", func(t *testing.T) {
		p.BlackHoleDownstream()
		l := newLateRec()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := conn.MultiCtx(ctx, l.late, create("lost"))
		if !errors.Is(err, context.DeadlineExceeded) {
			p.Heal()
			t.Fatalf("MultiCtx: %v, want the deadline", err)
		}
		waitFor(t, 10*time.Second, "the multi applied", func() bool {
			ok, _, _ := check.Exists(base + "/lost")
			return ok
		})
		if n := l.count(); n != 0 {
			t.Fatalf("late called before the connection was cut")
		}
		p.ResetConnections()
		p.Heal()
		if err := l.first(t, 15*time.Second, "answer lost"); !errors.Is(err, zk.ErrConnectionClosed) {
			t.Fatalf("late got %v, want a lost connection", err)
		}
		l.once(t, "answer lost")
	})

	t.Run("cut while waiting", func(t *testing.T) {
		waitFor(t, 20*time.Second, "reconnected", func() bool { return conn.State() == zk.StateHasSession })
		p.BlackHoleDownstream()
		l := newLateRec()
		res := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := conn.MultiCtx(ctx, l.late, create("cut"))
			res <- err
		}()
		waitFor(t, 10*time.Second, "the multi applied", func() bool {
			ok, _, _ := check.Exists(base + "/cut")
			return ok
		})
		p.ResetConnections()
		p.Heal()
		select {
		case err := <-res:
			if !errors.Is(err, zk.ErrConnectionClosed) {
				t.Fatalf("MultiCtx: %v, want a lost connection", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("MultiCtx did not return after the cut")
		}
		time.Sleep(150 * time.Millisecond)
		if n := l.count(); n != 0 {
			t.Fatalf("late called %d times for a multi whose MultiCtx returned", n)
		}
	})
}

// zmEngine is an engine dialing through f (and p when not nil).
func zmEngine(t *testing.T, servers []string, root string, f *zmFaults, tweak ...func(*lock.Options)) *lock.Engine {
	t.Helper()
	return newEngine(t, servers, root, append([]func(*lock.Options){func(o *lock.Options) {
		o.SessionTimeout = 8 * time.Second
		o.ObjectNode = lock.Persistent // no container reaped under the test's watches
		o.Dialer = f.dial
		o.AuditInterval = -1 // no audit deletes what the engine's own handling left
	}}, tweak...)...)
}

func zmConnOf(t *testing.T, e *lock.Engine) *zk.Conn {
	t.Helper()
	c, err := lock.ReviewZmultiConn(e)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// zmRoundTrip waits for a round trip of e's session: whatever it had
// queued or stalled before is answered (the server answers a session's
// requests in order), so another engine's check cannot overtake it.
func zmRoundTrip(t *testing.T, e *lock.Engine) {
	t.Helper()
	waitFor(t, 20*time.Second, "a round trip of the engine's session", func() bool {
		c, err := lock.ReviewZmultiConn(e)
		if err != nil {
			return false
		}
		_, err = c.Sync("/")
		return err == nil
	})
}

func zmSlotsFree(t *testing.T, e *lock.Engine, within time.Duration, what string) {
	t.Helper()
	waitFor(t, within, what+": create slots given back", func() bool { return e.CreateSlots() == 0 })
}

// TestReviewZmultiBoundedSlots: boundedMulti holds one of the session's
// create slots while its multi may be in flight and gives it back exactly
// once, at every point the context can end.
func TestReviewZmultiBoundedSlots(t *testing.T) {
	root := testRoot(t, zkServer)
	p := testenv.ProxyT(t, zkServer.Addr(1))
	f := newZmFaults()
	e := zmEngine(t, []string{p.Addr()}, root, f)
	conn := zmConnOf(t, e)
	check := rawConn(t, zkServer.Servers())
	base := root + "/zmslots"
	zmBase(t, check, "/t", root, base)
	ops := func(name string) []any {
		return []any{&zk.CreateRequest{Path: base + "/" + name, Acl: zk.WorldACL(zk.PermAll)}}
	}

	t.Run("answered", func(t *testing.T) {
		l := newLateRec()
		if _, err := lock.ReviewZmultiBounded(context.Background(), e, ops("a"), l.late); err != nil {
			t.Fatal(err)
		}
		if _, err := lock.ReviewZmultiBounded(context.Background(), e, ops("a"), l.late); !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("got %v, want node exists", err)
		}
		if n := e.CreateSlots(); n != 0 {
			t.Fatalf("%d slots taken after answered multis", n)
		}
		if l.count() != 0 {
			t.Fatal("orphan called for answered multis")
		}
	})

	t.Run("ended before", func(t *testing.T) {
		for range 20 {
			l := newLateRec()
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := lock.ReviewZmultiBounded(ctx, e, ops("b"), l.late); !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want canceled", err)
			}
			zmSlotsFree(t, e, 5*time.Second, "ended before")
			time.Sleep(20 * time.Millisecond)
			if n := l.count(); n > 1 {
				t.Fatalf("orphan called %d times", n)
			}
		}
	})

	t.Run("queue full", func(t *testing.T) {
		lift := zmStall(t, f, conn)
		wait := zmFill(t, conn)
		l := newLateRec()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := lock.ReviewZmultiBounded(ctx, e, ops("c"), l.late); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want the deadline", err)
		}
		if err := l.first(t, 3*time.Second, "queue full"); !errors.Is(err, zk.ErrNotSent) {
			t.Fatalf("orphan got %v, want ErrNotSent", err)
		}
		zmSlotsFree(t, e, 3*time.Second, "never sent (still stalled)")
		lift()
		wait()
		l.once(t, "queue full")
	})

	t.Run("write stalled", func(t *testing.T) {
		f.setStall(true)
		l := newLateRec()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := lock.ReviewZmultiBounded(ctx, e, ops("d"), l.late)
		if !errors.Is(err, context.DeadlineExceeded) {
			f.setStall(false)
			t.Fatalf("got %v, want the deadline", err)
		}
		n := e.CreateSlots()
		f.setStall(false)
		if n != 1 {
			t.Errorf("%d slots taken with the multi in flight, want 1", n)
		}
		if err := l.first(t, 10*time.Second, "write stalled"); err != nil {
			t.Fatalf("orphan got %v, want success", err)
		}
		zmSlotsFree(t, e, 3*time.Second, "answered late")
		l.once(t, "write stalled")
	})

	t.Run("answer lost", func(t *testing.T) {
		waitFor(t, 20*time.Second, "engine connected", func() bool { return e.Health().Connected })
		p.BlackHoleDownstream()
		l := newLateRec()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := lock.ReviewZmultiBounded(ctx, e, ops("e"), l.late)
		if !errors.Is(err, context.DeadlineExceeded) {
			p.Heal()
			t.Fatalf("got %v, want the deadline", err)
		}
		waitFor(t, 10*time.Second, "the multi applied", func() bool {
			ok, _, _ := check.Exists(base + "/e")
			return ok
		})
		if n := e.CreateSlots(); n != 1 {
			t.Errorf("%d slots taken with the answer outstanding, want 1", n)
		}
		p.ResetConnections()
		p.Heal()
		if err := l.first(t, 15*time.Second, "answer lost"); !errors.Is(err, zk.ErrConnectionClosed) {
			t.Fatalf("orphan got %v, want a lost connection", err)
		}
		zmSlotsFree(t, e, 3*time.Second, "connection cut")
		l.once(t, "answer lost")
	})
}

// TestReviewZmultiSlotAnswerWrapsCtxErr: boundedMulti decided whether the
// late function would give the create slot back by the kind of error
// MultiCtx returned (isCtxErr), but an answer's error can be a context
// error too: a connection from Options.Dialer (a tunnel, a websocket)
// whose Write fails with an error wrapping context.DeadlineExceeded hands
// go-zookeeper that error for the request. MultiCtx returns it as the
// answer (late is not called) and boundedMulti kept the slot for a late
// function that never comes: one slot lost per such failure, and after 64
// every waiter's create and fast path waits for a slot until its wait
// runs out, with ZooKeeper healthy. (zcall's bounded gave it back when f
// returned, whatever it returned.)
func TestReviewZmultiSlotAnswerWrapsCtxErr(t *testing.T) {
	root := testRoot(t, zkServer)
	f := newZmFaults()
	e := zmEngine(t, zkServer.Servers(), root, f)
	werr := &net.OpError{Op: "write", Net: "tcp", Err: fmt.Errorf("tunnel: %w", context.DeadlineExceeded)}
	f.armFailMulti(1, werr)
	// the plugin's fast path (one multi: child and privateLock) takes a
	// slot; its write fails, the connection drops, the request recovers
	// (uncertain, slow path) and is granted
	g := acquire(t, e, "zm-wrap", lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
	if f.failedMultis() != 1 {
		t.Fatalf("%d multi writes failed, want 1", f.failedMultis())
	}
	release(t, g)
	zmSlotsFree(t, e, 5*time.Second, "after a multi whose write failed")
}

// zmExpectILE checks an acquire's outcome: an InstanceLockError for its
// wait, within bound.
func zmExpectILE(t *testing.T, e *lock.Engine, obj string, wait, bound time.Duration) {
	t.Helper()
	start := time.Now()
	g, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: wait})
	d := time.Since(start)
	var ile *lock.InstanceLockError
	if err == nil {
		_ = g.Release(context.Background())
		t.Fatalf("Acquire(%s) granted, want an InstanceLockError", obj)
	}
	if !errors.As(err, &ile) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire(%s): %v, want an InstanceLockError for the deadline", obj, err)
	}
	if d > bound {
		t.Errorf("Acquire(%s) returned after %v, want within %v", obj, d, bound)
	}
}

// zmNoChild watches obj's children (through conn) from now and reports
// through the returned function whether any child was created since.
func zmNoChild(t *testing.T, conn *zk.Conn, root, obj string) (created func() bool) {
	t.Helper()
	name, err := lock.EscapeObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	p := path.Join(root, name)
	kids, _, ev, err := conn.ChildrenW(p)
	if err != nil {
		t.Fatal(err)
	}
	before := slices.Clone(kids)
	return func() bool {
		select {
		case <-ev:
			return true
		default:
		}
		now, _, err := conn.Children(p)
		return err == nil && !slices.Equal(now, before)
	}
}

// zmQueueFull: a session whose send queue is full (writes stalled): an
// uncontended acquire's fast-path multi and a release's multi are never
// handed to the connection. The acquire must fail at its deadline and
// leave nothing (its multi is never sent: no node appears even after the
// stall ends); the release, reported done, must complete once the session
// sends again (the plugin release's orphan queues its cleanup for
// ErrNotSent; the native one's caller does).
func zmQueueFull(t *testing.T, native bool) {
	root := testRoot(t, zkServer)
	f := newZmFaults()
	var tweak []func(*lock.Options)
	if native {
		tweak = append(tweak, func(o *lock.Options) { o.Protocol = lock.Native })
	}
	e := zmEngine(t, zkServer.Servers(), root, f, tweak...)
	e2 := zmEngine(t, zkServer.Servers(), root, newZmFaults(), tweak...)
	check := rawConn(t, zkServer.Servers())
	const fast, held = "zm-fast", "zm-held"
	zmCleanObjects(t, check, root, fast, held)
	// two lone cycles: the next acquire of fast takes the fast path
	release(t, acquire(t, e, fast, lock.Foreground, lock.AcquireOptions{}))
	release(t, acquire(t, e, fast, lock.Foreground, lock.AcquireOptions{}))
	g := acquire(t, e, held, lock.Foreground, lock.AcquireOptions{})
	created := zmNoChild(t, check, root, fast)
	heldKids := children(t, check, root, held)

	conn := zmConnOf(t, e)
	lift := zmStall(t, f, conn)
	wait := zmFill(t, conn)
	// the fail's inspection waits up to 2s (errorInspect) for the stalled session
	zmExpectILE(t, e, fast, 300*time.Millisecond, 300*time.Millisecond+2*time.Second+2*time.Second)
	if n := e.CreateSlots(); n != 0 {
		t.Errorf("%d create slots taken after a fast path never sent", n)
	}
	rctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	err := g.Release(rctx)
	cancel()
	if err != nil {
		t.Fatalf("Release with the queue full: %v, want nil (completed in the background)", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Release returned after %v with a 200ms context", d)
	}
	if !slices.Equal(children(t, check, root, held), heldKids) {
		t.Fatal("the held object changed while the session could not send")
	}
	lift()
	wait()

	// the release completes: the other engine is granted at once
	waitFor(t, 15*time.Second, "the release completed in the background", func() bool {
		g2, err := e2.Acquire(context.Background(), held, lock.Foreground, lock.AcquireOptions{TryOnce: true})
		if err != nil {
			return false
		}
		_ = g2.Release(context.Background())
		return true
	})
	// a round trip of e's session after the stall: anything it had
	// queued before is applied by now
	if _, err := conn.Sync("/"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if created() {
		t.Error("the fast path's multi, its acquire failed while never sent, created nodes after the stall")
	}
	zmSlotsFree(t, e, 5*time.Second, "after the stall")
	release(t, acquire(t, e2, fast, lock.Foreground, lock.AcquireOptions{TryOnce: true}))
}

func TestReviewZmultiQueueFullPlugin(t *testing.T) { zmQueueFull(t, false) }
func TestReviewZmultiQueueFullNative(t *testing.T) { zmQueueFull(t, true) }

// zmTryOnce reports whether e grants obj at once (and releases it).
func zmTryOnce(e *lock.Engine, obj string) bool {
	g, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{TryOnce: true})
	if err != nil {
		return false
	}
	_ = g.Release(context.Background())
	return true
}

// zmLate: an acquire's multi and a release's multi handed to the
// connection and answered after the caller stopped waiting (the write
// stalled, then sent; or applied with the answer lost, then the connection
// cut). The failed acquire's grant is undone by its late function, the
// release reported done completes: another engine is granted both objects,
// and no node is left (testRoot's check).
func zmLate(t *testing.T, native bool) {
	root := testRoot(t, zkServer)
	p := testenv.ProxyT(t, zkServer.Addr(1))
	f := newZmFaults()
	var tweak []func(*lock.Options)
	if native {
		tweak = append(tweak, func(o *lock.Options) { o.Protocol = lock.Native })
	}
	e := zmEngine(t, []string{p.Addr()}, root, f, tweak...)
	e2 := zmEngine(t, zkServer.Servers(), root, newZmFaults(), tweak...)
	check := rawConn(t, zkServer.Servers())
	const fast, held = "zm-late-fast", "zm-late-held"
	zmCleanObjects(t, check, root, fast, held)
	release(t, acquire(t, e, fast, lock.Foreground, lock.AcquireOptions{}))
	release(t, acquire(t, e, fast, lock.Foreground, lock.AcquireOptions{}))
	const bound = 300*time.Millisecond + 2*time.Second + 2*time.Second // wait, the fail's inspection, slack

	settle := func(t *testing.T, what string) {
		t.Helper()
		zmRoundTrip(t, e)
		waitFor(t, 20*time.Second, what+": the other engine granted both objects", func() bool {
			return zmTryOnce(e2, fast) && zmTryOnce(e2, held)
		})
		zmSlotsFree(t, e, 10*time.Second, what)
	}

	t.Run("write stalled", func(t *testing.T) {
		g := acquire(t, e, held, lock.Foreground, lock.AcquireOptions{})
		f.setStall(true)
		zmExpectILE(t, e, fast, 300*time.Millisecond, bound)
		if n := e.CreateSlots(); n != 1 {
			t.Errorf("%d create slots taken with the fast path's multi in flight, want 1", n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := g.Release(ctx)
		cancel()
		f.setStall(false)
		if err != nil {
			t.Fatalf("Release with its multi stalled: %v, want nil", err)
		}
		settle(t, "write stalled")
	})

	t.Run("answer lost", func(t *testing.T) {
		waitFor(t, 20*time.Second, "engine connected", func() bool { return e.Health().Connected })
		g := acquire(t, e, held, lock.Foreground, lock.AcquireOptions{})
		p.BlackHoleDownstream()
		zmExpectILE(t, e, fast, 300*time.Millisecond, bound)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := g.Release(ctx)
		cancel()
		p.ResetConnections()
		p.Heal()
		if err != nil {
			t.Fatalf("Release with its answer lost: %v, want nil", err)
		}
		settle(t, "answer lost")
	})
}

func TestReviewZmultiLatePlugin(t *testing.T) { zmLate(t, false) }
func TestReviewZmultiLateNative(t *testing.T) { zmLate(t, true) }

// TestReviewZmultiStall: ZooKeeper stopped (SIGSTOP; the TCP connections
// stay up, nothing is answered): an acquire with a wait returns at its
// deadline with an InstanceLockError (plus the fail's bounded inspection),
// on the plugin's fast path and the native one, and a release with a
// context returns with it; both leave nothing once ZooKeeper runs again.
func TestReviewZmultiStall(t *testing.T) {
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{})
	root := testRoot(t, z)
	long := func(o *lock.Options) { o.SessionTimeout = 12 * time.Second; o.AuditInterval = -1 }
	native := func(o *lock.Options) { o.Protocol = lock.Native }
	type side struct {
		name    string
		e, e2   *lock.Engine
		g       *lock.Grant
		obj, hd string
	}
	sides := []*side{
		{name: "plugin", e: newEngine(t, z.Servers(), root, long), e2: newEngine(t, z.Servers(), root, long)},
		{name: "native", e: newEngine(t, z.Servers(), root+"n", long, native), e2: newEngine(t, z.Servers(), root+"n", long, native)},
	}
	conn := rawConn(t, z.Servers())
	t.Cleanup(func() { assertNoLeftovers(t, conn, root+"n") })
	for _, s := range sides {
		s.obj, s.hd = "zm-stall-"+s.name, "zm-stall-held-"+s.name
		release(t, acquire(t, s.e, s.obj, lock.Foreground, lock.AcquireOptions{}))
		release(t, acquire(t, s.e, s.obj, lock.Foreground, lock.AcquireOptions{}))
		s.g = acquire(t, s.e, s.hd, lock.Foreground, lock.AcquireOptions{})
	}
	if err := z.Pause(1); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = z.Resume(1)
		}
	}()
	const wait = time.Second
	const bound = wait + 2*time.Second + 2*time.Second // the fail's inspection (errorInspect), slack
	var wg sync.WaitGroup
	for _, s := range sides {
		wg.Go(func() { zmExpectILE(t, s.e, s.obj, wait, bound) })
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			start := time.Now()
			if err := s.g.Release(ctx); err != nil {
				t.Errorf("%s: Release with ZooKeeper stopped: %v, want nil", s.name, err)
			}
			if d := time.Since(start); d > 500*time.Millisecond+time.Second {
				t.Errorf("%s: Release with a 500ms context returned after %v", s.name, d)
			}
		})
	}
	wg.Wait()
	if err := z.Resume(1); err != nil {
		t.Fatal(err)
	}
	resumed = true
	for _, s := range sides {
		zmRoundTrip(t, s.e)
		waitFor(t, 30*time.Second, s.name+": the other engine granted both objects", func() bool {
			return zmTryOnce(s.e2, s.obj) && zmTryOnce(s.e2, s.hd)
		})
		zmSlotsFree(t, s.e, 15*time.Second, s.name)
	}
}

// zmTake: a waiter whose wait ends while its take's multi (the plugin's
// takePrivateLock, the native take) is stalled in the connection's write,
// then sent and applied: the waiter fails (InstanceLockError), its late
// function gives back what the multi granted and its fail deletes its
// child after it (the same session's queue, in order); the other engine is
// then granted, and nothing is left.
func zmTake(t *testing.T, native bool) {
	root := testRoot(t, zkServer)
	f := newZmFaults()
	var tweak []func(*lock.Options)
	if native {
		// the holder neither learns of the waiter nor names it: the
		// waiter takes
		tweak = append(tweak, func(o *lock.Options) { o.Protocol = lock.Native; o.HolderWatchDelay = time.Hour })
	}
	e := zmEngine(t, zkServer.Servers(), root, f, tweak...)
	e2 := zmEngine(t, zkServer.Servers(), root, newZmFaults(), tweak...)
	check := rawConn(t, zkServer.Servers())
	const obj = "zm-take"
	zmCleanObjects(t, check, root, obj)
	h := acquire(t, e2, obj, lock.Foreground, lock.AcquireOptions{})
	before := len(children(t, check, root, obj))
	type result struct {
		g   *lock.Grant
		err error
	}
	res := make(chan result, 1)
	const wait = 2500 * time.Millisecond
	start := time.Now()
	go func() {
		g, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: wait})
		res <- result{g, err}
	}()
	waitFor(t, 5*time.Second, "the waiter queued", func() bool { return len(children(t, check, root, obj)) > before })
	time.Sleep(100 * time.Millisecond) // its watch set
	f.setStallMultis(true)
	defer f.setStallMultis(false)
	release(t, h)
	var r result
	select {
	case r = <-res:
	case <-time.After(wait + 10*time.Second):
		t.Fatal("the waiter did not return")
	}
	d := time.Since(start)
	var ile *lock.InstanceLockError
	if r.err == nil {
		_ = r.g.Release(context.Background())
		t.Fatal("the waiter was granted with its take stalled")
	}
	if !errors.As(r.err, &ile) {
		t.Fatalf("the waiter: %v, want an InstanceLockError", r.err)
	}
	if d > wait+2*time.Second+2*time.Second {
		t.Errorf("the waiter returned after %v (wait %v)", d, wait)
	}
	f.mu.Lock()
	stalled := f.stalledMs
	f.mu.Unlock()
	if stalled != 1 {
		t.Fatalf("%d multis stalled, want the waiter's take", stalled)
	}
	f.setStallMultis(false)
	zmRoundTrip(t, e)
	waitFor(t, 20*time.Second, "the other engine granted the object", func() bool { return zmTryOnce(e2, obj) })
	zmSlotsFree(t, e, 10*time.Second, "take")
}

func TestReviewZmultiTakePlugin(t *testing.T) { zmTake(t, false) }
func TestReviewZmultiTakeNative(t *testing.T) { zmTake(t, true) }

// TestReviewZmultiReleaseAnswerWrapsCtxErr: a plugin release whose multi's
// write fails with an error wrapping a context error that is no
// *net.OpError (a connection from Options.Dialer) was taken for "the
// context ended first, the late function completes it": Release reported
// done and queued nothing, and no late call came, so privateLock and the
// child stayed, ephemeral nodes of a live session: the object blocked for
// every other requester until that session ends (the audit after the
// reconnect deletes them, when it is on; it is off here). (Before 8cd0531
// too: zcall returned f's error the same way.) The native release queues
// its cleanup for any such error.
func TestReviewZmultiReleaseAnswerWrapsCtxErr(t *testing.T) {
	root := testRoot(t, zkServer)
	f := newZmFaults()
	e := zmEngine(t, zkServer.Servers(), root, f) // (the audit after the reconnect would delete them)
	e2 := zmEngine(t, zkServer.Servers(), root, newZmFaults())
	check := rawConn(t, zkServer.Servers())
	const obj = "zm-rel-wrap"
	name, _ := lock.EscapeObject(obj)
	t.Cleanup(func() { _ = check.Delete(path.Join(root, name), -1) })
	g := acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
	f.armFailMulti(1, fmt.Errorf("tunnel: %w", context.DeadlineExceeded))
	if err := g.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if f.failedMultis() != 1 {
		t.Fatalf("%d multi writes failed, want the release's", f.failedMultis())
	}
	waitFor(t, 20*time.Second, "the other engine granted the released object", func() bool { return zmTryOnce(e2, obj) })
}

// zmPark: a native release whose multi grants a request parked behind it
// (endNative with a parked request: its child is created in the multi)
// and whose context ends with that multi stalled in the write (then
// applied), or never handed to the connection (the send queue full). The
// release reports done, the parked request is told the multi may have
// landed (uncertain) and recovers: it is granted, and once it releases
// another engine is granted; nothing is left.
func zmPark(t *testing.T, full bool) {
	root := testRoot(t, zkServer)
	f := newZmFaults()
	native := func(o *lock.Options) { o.Protocol = lock.Native; o.DisableParking = false }
	e := zmEngine(t, zkServer.Servers(), root, f, native)
	e2 := zmEngine(t, zkServer.Servers(), root, newZmFaults(), native)
	check := rawConn(t, zkServer.Servers())
	const obj = "zm-park"
	zmCleanObjects(t, check, root, obj)
	g := acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
	type result struct {
		g   *lock.Grant
		err error
	}
	res := make(chan result, 1)
	go func() {
		g, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
		res <- result{g, err}
	}()
	waitFor(t, 5*time.Second, "the request parked", func() bool { n, _ := e.PreviewParked(obj); return n == 1 })
	conn := zmConnOf(t, e)
	var lift func()
	if full {
		l := zmStall(t, f, conn)
		wait := zmFill(t, conn)
		lift = func() { l(); wait() }
	} else {
		f.setStallMultis(true)
		lift = func() { f.setStallMultis(false) }
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	rel := make(chan error, 1)
	go func() { rel <- g.Release(ctx) }()
	// the release's multi grants the parked request (parkTake took it)
	host := false
	for deadline := time.Now().Add(400 * time.Millisecond); !host && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		_, host = e.PreviewParked(obj)
	}
	err := <-rel
	cancel()
	if !host {
		lift()
		t.Fatal("the release's multi did not take the parked request")
	}
	if !full {
		f.mu.Lock()
		stalled := f.stalledMs
		f.mu.Unlock()
		if stalled != 1 {
			lift()
			t.Fatalf("%d multis stalled, want the release's", stalled)
		}
	}
	lift()
	if err != nil {
		t.Fatalf("Release: %v, want nil", err)
	}
	zmRoundTrip(t, e)
	var r result
	select {
	case r = <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("the parked request not granted within 10s of the stall's end")
	}
	if r.err != nil {
		t.Fatalf("the parked request: %v, want granted", r.err)
	}
	release(t, r.g)
	waitFor(t, 20*time.Second, "the other engine granted the object", func() bool { return zmTryOnce(e2, obj) })
}

func TestReviewZmultiParkStalled(t *testing.T)   { zmPark(t, false) }
func TestReviewZmultiParkQueueFull(t *testing.T) { zmPark(t, true) }

// zmOddCtx is a context whose Err, once done, is an error of its own (the
// context package documents Canceled or DeadlineExceeded; the same value
// on every call, which it keeps).
type zmOddCtx struct{ done chan struct{} }

var errZmOdd = errors.New("review: the caller went away")

func (zmOddCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c zmOddCtx) Done() <-chan struct{}     { return c.done }
func (zmOddCtx) Value(any) any               { return nil }
func (c zmOddCtx) Err() error {
	select {
	case <-c.done:
		return errZmOdd
	default:
		return nil
	}
}

// TestReviewZmultiOddContextErr: the other way isCtxErr could disagree
// with MultiCtx. A caller's context whose error is neither Canceled nor
// DeadlineExceeded (Acquire's wait context inherits its parent's) ends
// with the fast path's multi in flight: MultiCtx returns that error and
// will call late; boundedMulti, seeing no context error, gave the slot
// back, and the late function's own give-back then blocked on the empty
// slot channel before it reached the orphan handler: the multi, granted
// after the caller gave up, was never undone, and privateLock stayed
// (ephemeral, live session) blocking the object.
func TestReviewZmultiOddContextErr(t *testing.T) {
	root := testRoot(t, zkServer)
	f := newZmFaults()
	e := zmEngine(t, zkServer.Servers(), root, f)
	e2 := zmEngine(t, zkServer.Servers(), root, newZmFaults())
	check := rawConn(t, zkServer.Servers())
	const obj = "zm-odd"
	name, _ := lock.EscapeObject(obj)
	t.Cleanup(func() { _ = check.Delete(path.Join(root, name), -1) })
	release(t, acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})) // the object node exists
	f.setStallMultis(true)
	defer f.setStallMultis(false)
	odd := zmOddCtx{done: make(chan struct{})}
	var once sync.Once
	cancel := func() { once.Do(func() { close(odd.done) }) }
	defer cancel()
	res := make(chan error, 1)
	go func() {
		g, err := e.Acquire(odd, obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
		if err == nil {
			_ = g.Release(context.Background())
		}
		res <- err
	}()
	waitFor(t, 10*time.Second, "the fast path's multi stalled", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.stalledMs == 1
	})
	cancel()
	select {
	case err := <-res:
		if err == nil {
			t.Fatal("granted with the multi stalled")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the acquire did not return after its context ended")
	}
	f.setStallMultis(false)
	zmRoundTrip(t, e)
	waitFor(t, 15*time.Second, "the other engine granted the object", func() bool { return zmTryOnce(e2, obj) })
	zmSlotsFree(t, e, 5*time.Second, "odd context")
}
