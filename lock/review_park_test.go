package lock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/testenv"
)

// Review of ee4f785 (local waiters park behind a holder of their engine,
// native protocol; a release that names nobody grants the first parked
// request in its own multi).
//
// Fault injection: the engine talks to ZooKeeper through a testenv proxy
// (HoldUpstream keeps a release's multi from the server while the test
// acts, BlackHoleDownstream loses its answer); a direct client plays the
// operator and the plugin participant. PreviewParked (export_preview_test.go)
// shows the parked queue and whether a release took its first request.

// prSetup is one parking engine behind a proxy, a direct client, and a
// holder of obj.
type prSetup struct {
	p       *testenv.Proxy
	e       *lock.Engine
	conn    *zk.Conn
	root    string
	obj     string
	objPath string
	h       *lock.Grant
}

func prStart(t *testing.T, obj string, tweak ...func(*lock.Options)) *prSetup {
	t.Helper()
	root := testRoot(t, zkServer)
	p := testenv.ProxyT(t, zkServer.Addr(1))
	tw := append([]func(*lock.Options){native, parking, noAudit, func(o *lock.Options) {
		o.HolderWatchDelay = time.Minute
		o.SessionTimeout = 10 * time.Second // outlasts the holds below
	}}, tweak...)
	e := newEngine(t, []string{p.Addr()}, root, tw...)
	name, err := lock.EscapeObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	s := &prSetup{p: p, e: e, conn: rawConn(t, zkServer.Servers()), root: root, obj: obj, objPath: root + "/" + name}
	s.h = acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
	return s
}

type prResult struct {
	g   *lock.Grant
	err error
}

// park starts an acquire on e that parks (the parked count reaches want).
func (s *prSetup) park(t *testing.T, ctx context.Context, want int, wait time.Duration) <-chan prResult {
	t.Helper()
	ch := make(chan prResult, 1)
	go func() {
		g, err := s.e.Acquire(ctx, s.obj, lock.Foreground, lock.AcquireOptions{Wait: wait})
		ch <- prResult{g, err}
	}()
	waitFor(t, 10*time.Second, "the request parked", func() bool { n, _ := s.e.PreviewParked(s.obj); return n == want })
	return ch
}

// startRelease holds the engine's bytes and starts the holder's release;
// it returns once the release multi took the first parked request.
func (s *prSetup) startRelease(t *testing.T, g *lock.Grant, parkedLeft int) <-chan error {
	t.Helper()
	s.p.HoldUpstream()
	ch := make(chan error, 1)
	go func() { ch <- g.Release(context.Background()) }()
	waitFor(t, 10*time.Second, "the release multi took a parked request", func() bool {
		n, req := s.e.PreviewParked(s.obj)
		return n == parkedLeft && req
	})
	return ch
}

// serveAll takes the grants of chs in whatever order they come (parked
// requests sent on to queue race to create their children), checking
// each against chk, and releases each.
func serveAll(t *testing.T, chk *overlapChecker, chs ...<-chan prResult) {
	t.Helper()
	merged := make(chan prResult, len(chs))
	for _, ch := range chs {
		go func() { merged <- <-ch }()
	}
	for range chs {
		r := prGet(t, merged, "a parked request")
		if r.err != nil {
			t.Fatalf("parked request: %v", r.err)
		}
		chk.enter(r.g.Token())
		chk.leave()
		release(t, r.g)
	}
}

func prGet[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer after 30s", what)
	}
	var zero T
	return zero
}

// kidsBut lists obj's children but the sentinel.
// remoteQueued starts a foreground request of engine other on the object
// (request id "remote") and waits until its child is there.
func (s *prSetup) remoteQueued(t *testing.T, other *lock.Engine) <-chan prResult {
	t.Helper()
	remote := make(chan prResult, 1)
	go func() {
		g, err := other.Acquire(context.Background(), s.obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, RequestID: "remote"})
		remote <- prResult{g, err}
	}()
	waitFor(t, 10*time.Second, "the remote request queued", func() bool {
		return strings.Contains(strings.Join(s.kidsBut(t), " "), "remote")
	})
	return remote
}

// prTake records a grant's label in order and releases it (what: the
// request, for the failure).
func prTake(t *testing.T, order *[]string, label, what string, r prResult) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("%s: %v", what, r.err)
	}
	*order = append(*order, label)
	release(t, r.g)
}

func (s *prSetup) kidsBut(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, k := range children(t, s.conn, s.root, s.obj) {
		if k != "privateLock" {
			out = append(out, k)
		}
	}
	return out
}

// A parked request whose caller gives up after a release took it (the
// multi that creates its child and names it in flight): the request waits
// for the multi, gives back what it got and fails with InstanceLockError;
// the request parked behind it is served, and nothing is left.
func TestReviewParkCancelWhileTaken(t *testing.T) {
	s := prStart(t, "obj")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := s.park(t, ctx, 1, 30*time.Second)
	second := s.park(t, context.Background(), 2, 30*time.Second)
	rel := s.startRelease(t, s.h, 1)
	cancel()
	time.Sleep(100 * time.Millisecond)
	s.p.Heal()
	if err := prGet(t, rel, "the release"); err != nil {
		t.Fatalf("release: %v", err)
	}
	r := prGet(t, first, "the cancelled parked request")
	var ile *lock.InstanceLockError
	if r.err == nil {
		r.g.Release(context.Background())
		t.Fatalf("the cancelled request was granted (token %d)", r.g.Token())
	}
	if !errors.As(r.err, &ile) {
		t.Errorf("cancelled parked request: %v; want InstanceLockError", r.err)
	}
	r2 := prGet(t, second, "the second parked request")
	if r2.err != nil {
		t.Fatalf("the second parked request: %v", r2.err)
	}
	if r2.g.Token() <= s.h.Token() {
		t.Errorf("token %d after %d", r2.g.Token(), s.h.Token())
	}
	if k := s.kidsBut(t); len(k) != 1 || k[0] != r2.g.Node() {
		t.Errorf("children while the second request holds: %v; want only %s", k, r2.g.Node())
	}
	release(t, r2.g)
}

// The answer of the release multi that grants a parked request is lost
// (it landed: the reply is swallowed, then the connection reset). The
// parked request gives back what landed and queues again; nobody holds
// twice, the request behind it is served, nothing is left.
func TestReviewParkReplyLost(t *testing.T) {
	s := prStart(t, "obj")
	var chk overlapChecker
	chk.enter(s.h.Token())
	first := s.park(t, context.Background(), 1, 30*time.Second)
	second := s.park(t, context.Background(), 2, 30*time.Second)
	s.p.BlackHoleDownstream()
	rel := make(chan error, 1)
	go func() { rel <- s.h.Release(context.Background()) }()
	// the multi landed: a child of the first parked request, named
	waitFor(t, 10*time.Second, "the release multi landed", func() bool {
		k := s.kidsBut(t)
		return len(k) == 1 && k[0] != s.h.Node()
	})
	chk.leave()
	s.p.ResetConnections()
	s.p.Heal()
	if err := prGet(t, rel, "the release"); err != nil {
		t.Logf("release: %v", err)
	}
	serveAll(t, &chk, first, second)
	chk.verify(t, 3)
}

// Engine.Close with requests parked: Close returns, the parked requests
// fail at once with an error wrapping ErrUnavailable (ErrClosed), and
// nothing is left.
func TestReviewParkClose(t *testing.T) {
	s := prStart(t, "obj")
	first := s.park(t, context.Background(), 1, time.Minute)
	second := s.park(t, context.Background(), 2, time.Minute)
	closed := make(chan error, 1)
	go func() { closed <- s.e.Close() }()
	prGet(t, closed, "Close")
	for _, ch := range []<-chan prResult{first, second} {
		select {
		case r := <-ch:
			if r.err == nil {
				t.Errorf("granted (token %d) on a closed engine", r.g.Token())
			} else if !errors.Is(r.err, lock.ErrClosed) && !errors.Is(r.err, lock.ErrUnavailable) {
				t.Errorf("parked request on Close: %v; want ErrClosed/ErrUnavailable", r.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a parked request still waits 5s after Close")
		}
	}
}

// The session is lost (the engine hears nothing for the session timeout)
// with requests parked: the holder is lost, the parked requests fail with
// ErrUnavailable (no hang), another engine takes the object afterwards.
func TestReviewParkSessionLost(t *testing.T) {
	s := prStart(t, "obj", func(o *lock.Options) { o.SessionTimeout = 4 * time.Second })
	first := s.park(t, context.Background(), 1, time.Minute)
	second := s.park(t, context.Background(), 2, time.Minute)
	s.p.BlackHole()
	select {
	case <-s.h.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("holder not lost 20s into a black hole")
	}
	for _, ch := range []<-chan prResult{first, second} {
		select {
		case r := <-ch:
			if r.err == nil {
				t.Errorf("granted (token %d) on a lost session", r.g.Token())
			} else if !errors.Is(r.err, lock.ErrUnavailable) {
				t.Errorf("parked request on a lost session: %v; want ErrUnavailable", r.err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("a parked request still waits 15s after its session was lost")
		}
	}
	s.p.Heal()
	e2 := newEngine(t, zkServer.Servers(), s.root, native)
	release(t, acquire(t, e2, s.obj, lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second}))
}

// The connection drops while the release multi granting a parked request
// is held, and stays away past the session timeout (the server expires the
// session). Then the proxy heals: no hang, no grant reported on the
// expired session (each parked request fails or is granted on its own
// terms), another engine takes the object afterwards, nothing is left.
func TestReviewParkSessionLostMidMulti(t *testing.T) {
	s := prStart(t, "obj", func(o *lock.Options) { o.SessionTimeout = 4 * time.Second })
	first := s.park(t, context.Background(), 1, time.Minute)
	second := s.park(t, context.Background(), 2, time.Minute)
	rel := s.startRelease(t, s.h, 1)
	waitFor(t, 20*time.Second, "the connection dropped", func() bool { return !s.e.Health().Connected })
	time.Sleep(6 * time.Second) // the server expires the session
	s.p.Heal()
	prGet(t, rel, "the release")
	var chk overlapChecker
	for _, ch := range []<-chan prResult{first, second} {
		select {
		case r := <-ch:
			if r.err == nil {
				chk.enter(r.g.Token())
				chk.leave()
				t.Logf("granted after the expiry: token %d", r.g.Token())
				r.g.Release(context.Background())
			} else {
				t.Logf("parked request: %v", r.err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a parked request still waits 30s after the proxy healed")
		}
	}
	e2 := newEngine(t, zkServer.Servers(), s.root, native)
	g := acquire(t, e2, s.obj, lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
	chk.enter(g.Token())
	chk.leave()
	release(t, g)
	chk.verify(t, -1)
}

// The holder's release fails (ErrNoAuth: WRITE taken off the object
// node) with requests parked: the release reports it and the grant stays
// held; the parked requests queue the usual way and are served once a
// release succeeds; no overlap, nothing left.
func TestReviewParkReleaseFails(t *testing.T) {
	s := prStart(t, "obj")
	var chk overlapChecker
	chk.enter(s.h.Token())
	first := s.park(t, context.Background(), 1, 30*time.Second)
	second := s.park(t, context.Background(), 2, 30*time.Second)
	t.Cleanup(func() { _, _ = s.conn.SetACL(s.objPath, zk.WorldACL(zk.PermAll), -1) })
	if _, err := s.conn.SetACL(s.objPath, zk.WorldACL(zk.PermAll&^zk.PermWrite), -1); err != nil {
		t.Fatal(err)
	}
	if err := s.h.Release(context.Background()); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("release = %v; want ErrNoAuth", err)
	}
	if s.h.State() != lock.Held {
		t.Fatalf("after the failed release: %v, want Held", s.h.State())
	}
	select {
	case r := <-first:
		t.Fatalf("a parked request answered while the holder holds: %v", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := s.conn.SetACL(s.objPath, zk.WorldACL(zk.PermAll), -1); err != nil {
		t.Fatal(err)
	}
	chk.leave()
	release(t, s.h)
	serveAll(t, &chk, first, second)
	chk.verify(t, 3)
}

// An operator deletes the holder's child (and names nobody) with
// requests parked; the holder's release then finds it gone and reports
// the grant lost. The parked requests are served in turn, no overlap.
func TestReviewParkHostChildDeleted(t *testing.T) {
	s := prStart(t, "obj")
	first := s.park(t, context.Background(), 1, 30*time.Second)
	second := s.park(t, context.Background(), 2, 30*time.Second)
	if err := s.conn.Delete(s.objPath+"/"+s.h.Node(), -1); err != nil {
		t.Fatal(err)
	}
	err := s.h.Release(context.Background())
	t.Logf("release after the operator's delete: %v", err)
	var chk overlapChecker
	serveAll(t, &chk, first, second)
	chk.verify(t, 2)
}

// A plugin participant's node ("A-…") appears under the native root
// while a request is parked: the release multi that would grant the
// parked request sees it (the children count). The parked request must
// not be reported granted beside it: it fails with ErrForeignNode naming
// the root, as any native acquire beside a plugin node does, and leaves
// nothing of its own.
func TestReviewParkForeignNode(t *testing.T) {
	s := prStart(t, "obj")
	first := s.park(t, context.Background(), 1, 5*time.Second)
	a, err := s.conn.Create(s.objPath+"/A-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	release(t, s.h)
	r := prGet(t, first, "the parked request")
	if r.err == nil {
		t.Errorf("granted (token %d) beside the plugin node %s", r.g.Token(), a)
		release(t, r.g)
	} else if !errors.Is(r.err, lock.ErrForeignNode) || !strings.Contains(r.err.Error(), s.root) {
		t.Errorf("parked request beside a plugin node: %v; want ErrForeignNode naming %s", r.err, s.root)
	}
	if err := s.conn.Delete(a, -1); err != nil {
		t.Fatal(err)
	}
}

// A request of another engine queues behind a holder with a request
// parked: the holder's release grants the parked request past it (once,
// allowed: that multi's answer shows it queued). That grant then knows
// whom it passed; a request of its engine that parks behind it meanwhile
// must not pass the remote request a second time. The second grant's
// learnNative (its listing of who waits) is held from starting, as a
// goroutine not yet scheduled when a short critical section ends.
func TestReviewParkRemotePassedTwice(t *testing.T) {
	s := prStart(t, "obj")
	other := newEngine(t, zkServer.Servers(), s.root, native)
	first := s.park(t, context.Background(), 1, 30*time.Second)
	remote := s.remoteQueued(t, other)
	unhold := lock.PreviewHoldLearnStart()
	t.Cleanup(unhold)
	release(t, s.h)
	r1 := prGet(t, first, "the parked request")
	if r1.err != nil {
		t.Fatalf("the parked request: %v", r1.err)
	}
	second := s.park(t, context.Background(), 1, 30*time.Second)
	release(t, r1.g)
	var order []string
	for range 2 {
		select {
		case r := <-remote:
			prTake(t, &order, "remote", "remote", r)
		case r := <-second:
			prTake(t, &order, "second", "second parked request", r)
		case <-time.After(30 * time.Second):
			t.Fatalf("no grant after 30s (so far %v)", order)
		}
	}
	unhold()
	if order[0] != "remote" {
		t.Errorf("grant order %v: the remote request was passed by two parked requests; want at most one", order)
	}
}

// A parked request whose caller gives up while the answer of the release
// multi granting it is lost (it landed; the connection is then reset):
// InstanceLockError, what landed is given back (nothing of it left), and
// the request parked behind it is served.
func TestReviewParkCancelReplyLost(t *testing.T) {
	s := prStart(t, "obj")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := s.park(t, ctx, 1, 30*time.Second)
	second := s.park(t, context.Background(), 2, 30*time.Second)
	s.p.BlackHoleDownstream()
	rel := make(chan error, 1)
	go func() { rel <- s.h.Release(context.Background()) }()
	waitFor(t, 10*time.Second, "the release multi landed", func() bool {
		k := s.kidsBut(t)
		return len(k) == 1 && k[0] != s.h.Node()
	})
	cancel()
	time.Sleep(100 * time.Millisecond)
	s.p.ResetConnections()
	s.p.Heal()
	prGet(t, rel, "the release")
	r := prGet(t, first, "the cancelled parked request")
	var ile *lock.InstanceLockError
	if r.err == nil {
		r.g.Release(context.Background())
		t.Fatalf("the cancelled request was granted (token %d)", r.g.Token())
	}
	if !errors.As(r.err, &ile) {
		t.Errorf("cancelled parked request: %v; want InstanceLockError", r.err)
	}
	var chk overlapChecker
	serveAll(t, &chk, second)
	chk.verify(t, 1)
}

// The holder abandons with requests parked: they queue and are served.
func TestReviewParkAbandon(t *testing.T) {
	s := prStart(t, "obj")
	first := s.park(t, context.Background(), 1, 30*time.Second)
	second := s.park(t, context.Background(), 2, 30*time.Second)
	if err := s.h.Abandon(context.Background()); err != nil {
		t.Fatal(err)
	}
	var chk overlapChecker
	serveAll(t, &chk, first, second)
	chk.verify(t, 2)
}

// The session is lost just as the grant a release multi made for a parked
// request is registered (grant sees its grant lost and reports
// ErrUnavailable): the request parked behind it must not wait out its
// Wait behind a host that is gone; it fails at once with ErrUnavailable.
func TestReviewParkHostLostOnRegister(t *testing.T) {
	s := prStart(t, "obj")
	first := s.park(t, context.Background(), 1, time.Minute)
	second := s.park(t, context.Background(), 2, time.Minute)
	t.Cleanup(lock.PreviewLoseOnRegister())
	if err := s.h.Release(context.Background()); err != nil {
		t.Logf("release: %v", err)
	}
	for i, ch := range []<-chan prResult{first, second} {
		select {
		case r := <-ch:
			if r.err == nil {
				t.Errorf("parked request %d granted (token %d) on a lost session", i, r.g.Token())
			} else if !errors.Is(r.err, lock.ErrUnavailable) {
				t.Errorf("parked request %d: %v; want ErrUnavailable", i, r.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("parked request %d still waits 10s after its session was lost", i)
		}
	}
	// On the engine's next session the object hosts parked requests again
	// (the request whose grant was lost on registration is no host).
	waitFor(t, 20*time.Second, "a new session", func() bool { return s.e.Health().Connected })
	h := acquire(t, s.e, s.obj, lock.Foreground, lock.AcquireOptions{})
	p0 := s.e.Parks()
	ch := make(chan prResult, 1)
	go func() {
		g, err := s.e.Acquire(context.Background(), s.obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
		ch <- prResult{g, err}
	}()
	time.Sleep(300 * time.Millisecond)
	if s.e.Parks() == p0 {
		t.Errorf("no request parks on %q after the session loss: its parking host is still the request that was never granted", s.obj)
	}
	release(t, h)
	r := prGet(t, ch, "the request behind the new holder")
	if r.err != nil {
		t.Fatal(r.err)
	}
	release(t, r.g)
}

// Stress with faults: six callers of a parking engine behind a proxy (the
// connection reset now and then, some callers giving up after a few
// milliseconds, some holders abandoning) and one caller of another engine
// on one object. No overlap while the grants are held, rising tokens,
// every failure a wait that ran out (or the connection's), nothing left.
func TestReviewParkStressFaults(t *testing.T) {
	for _, remote := range []bool{false, true} {
		t.Run(fmt.Sprint("remote=", remote), func(t *testing.T) {
			root := testRoot(t, zkServer)
			p := testenv.ProxyT(t, zkServer.Addr(1))
			e := newEngine(t, []string{p.Addr()}, root, native, parking, func(o *lock.Options) {
				o.HolderWatchDelay = time.Minute
				o.SessionTimeout = 10 * time.Second
			})
			other := newEngine(t, zkServer.Servers(), root, native)
			var chk overlapChecker
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Duration(300+rand.IntN(300)) * time.Millisecond):
						p.ResetConnections()
					}
				}
			}()
			var wg sync.WaitGroup
			var grants, fails atomic.Int64
			for c := range 7 {
				eng := e
				if c == 6 {
					eng = other
				}
				wg.Go(func() {
					for j := range 30 {
						if c == 6 {
							time.Sleep(time.Duration(5+rand.IntN(10)) * time.Millisecond)
						}
						ctx, cancel := context.WithCancel(context.Background())
						wait := 30 * time.Second
						if (c+j)%4 == 1 {
							d := time.Duration(1+rand.IntN(15)) * time.Millisecond
							time.AfterFunc(d, cancel)
						}
						g, err := eng.Acquire(ctx, "obj", lock.Foreground, lock.AcquireOptions{Wait: wait})
						if err != nil {
							cancel()
							fails.Add(1)
							var ile *lock.InstanceLockError
							if !errors.As(err, &ile) && !errors.Is(err, lock.ErrUnavailable) {
								t.Errorf("caller %d: %v", c, err)
							}
							continue
						}
						grants.Add(1)
						chk.enter(g.Token())
						time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
						if st := g.State(); st != lock.Held && st != lock.Suspect {
							t.Errorf("caller %d: grant %v inside its critical section: %v", c, g.State(), g.Err())
						}
						chk.leave()
						end := g.Release
						if j%9 == 4 {
							end = g.Abandon
						}
						if err := end(context.Background()); err != nil && !errors.Is(err, lock.ErrUnavailable) {
							t.Errorf("caller %d release: %v", c, err)
						}
						cancel()
					}
				})
			}
			wg.Wait()
			close(stop)
			<-done
			chk.verify(t, -1)
			t.Logf("%d grants, %d failures; %d parked, %d granted parked", grants.Load(), fails.Load(), e.Parks(), e.ParkGrants())
			conn := rawConn(t, zkServer.Servers())
			waitFor(t, 20*time.Second, "nothing left", func() bool { return len(children(t, conn, root, "obj")) <= 1 })
		})
	}
}

// A holder whose child an operator deleted is gone for ZooKeeper, but
// its grant still reads "held" (the data names it; its watch follows the
// data, not the child) and it may hold for an hour. A request of the same
// engine that parks behind it must not wait for its end: as a waiter with
// a child of its own does (TestReviewMidviewDeletedHolderChildNoHang), it
// takes the object, and the holder, named no more, is lost. Deleted
// before the request came, and while it was parked.
func TestReviewParkHostChildDeletedNoHang(t *testing.T) {
	for _, order := range []string{"deleted-then-parked", "parked-then-deleted"} {
		t.Run(order, func(t *testing.T) {
			s := prStart(t, "obj", func(o *lock.Options) { o.HolderWatchDelay = 0 })
			defer s.h.Release(context.Background())
			del := func() {
				if err := s.conn.Delete(s.objPath+"/"+s.h.Node(), -1); err != nil {
					t.Fatal(err)
				}
			}
			if order == "deleted-then-parked" {
				del()
			}
			ch := s.park(t, context.Background(), 1, 15*time.Second)
			if order == "parked-then-deleted" {
				del()
			}
			r := prGet(t, ch, "the parked request")
			if r.err != nil {
				t.Fatalf("parked behind a holder whose child was deleted: %v (holder state %v)", r.err, s.h.State())
			}
			waitFor(t, 10*time.Second, "holder lost", func() bool { return s.h.State() == lock.Lost })
			release(t, r.g)
		})
	}
}

// The local holder is background, a request of another engine queues
// (foreground), a foreground request of the holder's engine parks behind
// it. The holder's release may grant the parked request past the remote
// one (once); the next request parking behind that grant comes after the
// remote one. (The second grant's learnNative is held from starting.)
func TestReviewParkBackgroundHost(t *testing.T) {
	s := prStart(t, "warm")
	release(t, s.h)
	s.obj = "bg"
	name, _ := lock.EscapeObject("bg")
	s.objPath = s.root + "/" + name
	s.h = acquire(t, s.e, "bg", lock.Background, lock.AcquireOptions{})
	other := newEngine(t, zkServer.Servers(), s.root, native)
	first := s.park(t, context.Background(), 1, 30*time.Second)
	remote := s.remoteQueued(t, other)
	unhold := lock.PreviewHoldLearnStart()
	t.Cleanup(unhold)
	release(t, s.h)
	var order []string
	var second <-chan prResult
	for len(order) < 3 {
		select {
		case r := <-first:
			// before its release: it parks behind the grant
			second = s.park(t, context.Background(), 1, 30*time.Second)
			prTake(t, &order, "first", "first parked request", r)
		case r := <-remote:
			prTake(t, &order, "remote", "remote", r)
		case r := <-second:
			prTake(t, &order, "second", "second parked request", r)
		case <-time.After(30 * time.Second):
			t.Fatalf("no grant after 30s (so far %v)", order)
		}
	}
	unhold()
	if slices.Index(order, "remote") > 1 {
		t.Errorf("grant order %v: the remote request was passed by two parked requests; want at most one", order)
	}
}
