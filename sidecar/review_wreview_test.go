package sidecar_test

import (
	"context"
	"path"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/sidecar"
	"github.com/batonhq/baton/testenv"
)

// freeingIs fails unless a's record of no-wait releases in flight holds n
// objects, its lock-free counter agreeing.
func freeingIs(t *testing.T, a *sc, n int, when string) {
	t.Helper()
	if objs, cnt := sidecar.Freeing(a.srv); objs != n || int(cnt) != n {
		t.Fatalf("%s: %d objects recorded as freeing (counter %d), want %d", when, objs, cnt, n)
	}
}

// waitFreeing waits until a's record of no-wait releases in flight is
// empty, its counter agreeing.
func waitFreeing(t *testing.T, a *sc, when string) {
	t.Helper()
	waitFor(t, 10*time.Second, when+": no release recorded as freeing", func() bool {
		objs, cnt := sidecar.Freeing(a.srv)
		return objs == 0 && cnt == 0
	})
}

// Review (wreview) of commits 992be5c (an acquire of an object whose
// no-wait release is in flight on this sidecar waits for that release,
// within its wait_ms) and 1820663 (the lease table's background goroutines
// start only while it is open).

// TestReviewWAcquireBoundedByWait: the release's write cannot reach
// ZooKeeper (the proxy holds the sidecar's requests), so the release in
// flight does not end within the acquire's wait. An acquire of the same
// object on that sidecar with wait_ms 1000 must still answer within its
// wait (+2 s of slack), with a 423 InstanceLockException whose waited_ms
// covers the wait — not go on for the engine's default wait
// (zookeeper.foreground.task.timeout, set to 20 s here) after its own
// wait ran out. No grant before the write lands; after the heal the
// object is granted with a greater token. On both protocols.
func TestReviewWAcquireBoundedByWait(t *testing.T) {
	for _, proto := range []string{"plugin", "native"} {
		t.Run(proto, func(t *testing.T) {
			root := testRoot(t)
			conn := rawConn(t)
			cfg, p := proxiedConfig(t, root, "wb-a")
			cfg.LockProtocol = proto
			cfg.ForegroundTimeout = 20 * time.Second
			// The held connection is not given up for ~6.7 s (2/3 of the
			// session timeout): the release in flight does not end
			// within the acquire's wait + 2 s.
			cfg.ZKSessionTimeout = 10 * time.Second
			a := start(t, cfg)
			objPath := path.Join(root, "wb")

			l := a.acquire("wb", `{"lease_ms":60000}`)
			p.HoldUpstream()
			t.Cleanup(p.Heal)
			nowaitRelease(t, a, l)
			const waitMS = 1000
			ch := acquireAsync(a, "wb", `{"wait_ms":1000}`)
			var g acquired
			select {
			case g = <-ch:
			case <-time.After(waitMS*time.Millisecond + 2*time.Second):
				p.Heal()
				g = <-ch
				t.Fatalf("the acquire with wait_ms %d was not answered within its wait + 2 s (answered %d %s after the heal)", waitMS, g.status, g.body)
			}
			if g.status != 423 {
				t.Fatalf("the acquire while the release could not land: %d %s, want 423", g.status, g.body)
			}
			e := decodeError(t, g.body)
			if e.Kind != api.InstanceLockException || e.WaitedMS == nil || *e.WaitedMS < waitMS {
				t.Errorf("423 = %+v, want InstanceLockException with waited_ms >= %d", e, waitMS)
			}
			p.Heal()
			waitFor(t, 10*time.Second, "the released holder's node gone", func() bool {
				return !slices.Contains(kidsOf(t, conn, objPath), l.Node)
			})
			gl := a.acquire("wb", `{"wait_ms":4000}`)
			if gl.Token <= l.Token {
				t.Errorf("granted token %d after the release, not above %d", gl.Token, l.Token)
			}
			a.release(gl.LeaseID)
		})
	}
}

// TestReviewWFreeingLostInFlight: the record of a no-wait release in
// flight (what an acquire of the object waits for) ends when the release's
// write finds the lock already lost (an operator deleted its privateLock
// while the write was held back): no entry or count is left behind, and
// an acquire of the object is then granted at once (a leaked record would
// hold it for its whole 20 s wait).
func TestReviewWFreeingLostInFlight(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	cfg, p := proxiedConfig(t, root, "wl-a")
	var lb logBuf
	a := start(t, cfg, withLog(&lb))
	objPath := path.Join(root, "wl")

	l := a.acquire("wl", `{"lease_ms":60000}`)
	time.Sleep(100 * time.Millisecond) // past the holder watch's arming delay
	p.HoldUpstream()
	t.Cleanup(p.Heal)
	nowaitRelease(t, a, l)
	freeingIs(t, a, 1, "the write held")
	if err := conn.Delete(objPath+"/privateLock", -1); err != nil { // the operator
		t.Fatalf("delete privateLock: %v", err)
	}
	p.Heal()
	waitFor(t, 10*time.Second, "the background release done", func() bool {
		return len(lb.lines("a release answered before its write found the lock already lost")) > 0
	})
	waitFreeing(t, a, "the write found the lock lost")
	ch := acquireAsync(a, "wl", `{"wait_ms":20000}`)
	select {
	case g := <-ch:
		if g.status != 200 {
			t.Fatalf("acquire after the lost release: %d %s", g.status, g.body)
		}
		if gl := decodeLease(t, g.body); gl.Token <= l.Token {
			t.Errorf("granted token %d, not above %d", gl.Token, l.Token)
		} else {
			a.release(gl.LeaseID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("acquire of the object not answered within 5 s of the lost release: it waits for a release no longer in flight")
	}
}

// TestReviewWSharedNotRecorded (native): a shared lease's no-wait release
// is not recorded (a shared acquire of the object is never held back by
// it); an exclusive acquire on the same sidecar made while that release is
// in flight is granted only once both shared holders are gone (the
// released one's node deleted, the other sidecar's lease released), with
// a token above both.
func TestReviewWSharedNotRecorded(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	p := testenv.ProxyT(t, zkServer.Addr(1))
	acfg, bcfg := testConfig(t, root, "ws-a"), testConfig(t, root, "ws-b")
	acfg.ZKServers = []string{p.Addr()}
	acfg.LockProtocol, bcfg.LockProtocol = "native", "native"
	a, b := start(t, acfg), start(t, bcfg)
	objPath := path.Join(root, "ws")

	r1 := a.acquire("ws", `{"mode":"shared","lease_ms":60000}`)
	r2 := b.acquire("ws", `{"mode":"shared","wait_ms":0,"lease_ms":60000}`)
	p.HoldUpstream()
	t.Cleanup(p.Heal)
	nowaitRelease(t, a, r1)
	freeingIs(t, a, 0, "a shared release in flight")
	x := acquireAsync(a, "ws", `{"wait_ms":8000}`)
	waitFor(t, 5*time.Second, "the exclusive acquire in flight", func() bool { return a.metric("baton_acquires_in_flight") == 1 })
	p.Heal()
	waitFor(t, 5*time.Second, "the shared release landed", func() bool { return !slices.Contains(kidsOf(t, conn, objPath), r1.Node) })
	time.Sleep(300 * time.Millisecond)
	select {
	case g := <-x:
		t.Fatalf("exclusive acquire answered while ws-b holds a shared lease: %d %s", g.status, g.body)
	default:
	}
	b.release(r2.LeaseID)
	g := <-x
	if g.status != 200 {
		t.Fatalf("exclusive acquire after both shared holders: %d %s", g.status, g.body)
	}
	gl := decodeLease(t, g.body)
	if gl.Token <= max(r1.Token, r2.Token) {
		t.Errorf("exclusive token %d, not above the shared %d and %d", gl.Token, r1.Token, r2.Token)
	}
	if kids := kidsOf(t, conn, objPath); slices.Contains(kids, r1.Node) || slices.Contains(kids, r2.Node) {
		t.Errorf("exclusive granted with a shared holder's node still there: %v", kids)
	}
	a.release(gl.LeaseID)
}

// TestReviewWShutdownWhileWaiting: an acquire waiting for a no-wait
// release whose write cannot land (30 s wait) is answered 503 ShuttingDown
// as soon as the sidecar drains — not after its wait — and once Run has
// returned no release is recorded as freeing.
func TestReviewWShutdownWhileWaiting(t *testing.T) {
	root := testRoot(t)
	cfg, p := proxiedConfig(t, root, "wd-a")
	a := start(t, cfg)

	l := a.acquire("wd", `{"lease_ms":60000}`)
	p.HoldUpstream()
	t.Cleanup(p.Heal)
	nowaitRelease(t, a, l)
	ch := acquireAsync(a, "wd", `{"wait_ms":30000}`)
	waitFor(t, 5*time.Second, "the acquire in flight", func() bool { return a.metric("baton_acquires_in_flight") == 1 })
	a.cancel()
	select {
	case g := <-ch:
		if e := decodeError(t, g.body); g.status != 503 || e.Kind != api.ShuttingDown {
			t.Errorf("the waiting acquire at shutdown: %d %s, want 503 ShuttingDown", g.status, g.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the acquire waiting for the release in flight not answered within 5 s of the shutdown")
	}
	p.Heal()
	select {
	case err := <-a.done:
		a.done <- err
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within 15 s")
	}
	freeingIs(t, a, 0, "after Run returned")
}

// TestReviewWNoWaitAfterClose (1820663): a no-wait release that reaches
// the lease table once it is closed (teardown's first step; here the table
// is marked closed with the lease still live, "closed", or the rest of the
// release comes after Run returned, "after-run") answers promptly and
// never 202 "releasing" (no background write may start: teardown may be
// past its wait for them), leaves no release recorded as freeing and no
// goroutine (goleak in TestMain). With the table closed and the lease
// live, the release waits for its write: 200 released, the node gone.
func TestReviewWNoWaitAfterClose(t *testing.T) {
	for _, when := range []string{"closed", "after-run"} {
		t.Run(when, func(t *testing.T) {
			root := testRoot(t)
			conn := rawConn(t)
			cfg := testConfig(t, root, "wc-a")
			cfg.ShutdownGrace = 500 * time.Millisecond
			a := start(t, cfg)
			l := a.acquire("wc", `{"lease_ms":60000}`)
			rest := sidecar.SplitReleaseNoWait(a.srv, l.LeaseID)
			if when == "closed" {
				sidecar.CloseLeaseTable(a.srv)
			} else {
				a.cancel()
				select {
				case err := <-a.done:
					a.done <- err
					if err != nil {
						t.Fatalf("Run returned %v", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("Run did not return within 5 s")
				}
			}
			type answer struct {
				r   api.ReleaseResponse
				err error
			}
			ch := make(chan answer, 1)
			go func() { r, err := rest(); ch <- answer{r, err} }()
			var got answer
			select {
			case got = <-ch:
			case <-time.After(5 * time.Second):
				t.Fatal("no-wait release past the close not answered within 5 s")
			}
			if got.r.Releasing {
				t.Fatalf("no-wait release past the close = %+v, %v: releasing in the background of a closed table", got.r, got.err)
			}
			if when == "closed" {
				if got.err != nil || !got.r.Released || got.r.Token != l.Token {
					t.Errorf("no-wait release on the closed table = %+v, %v: want released (the write waited for)", got.r, got.err)
				}
				if kids := kidsOf(t, conn, path.Join(root, "wc")); slices.Contains(kids, l.Node) {
					t.Errorf("released, yet the holder's node %s is still there: %v", l.Node, kids)
				}
			} else if got.err == nil {
				t.Errorf("no-wait release after Run returned = %+v, want the lease's end (lost at shutdown)", got.r)
			}
			freeingIs(t, a, 0, "after the release past the close")
		})
	}
}

// TestReviewWWaitedCountsRelease: an acquire that waits part of its wait
// for the no-wait release in flight (its write held back ~1 s), then the
// rest in the engine behind another sidecar's waiter that is granted
// first, answers 423 InstanceLockException whose waited_ms counts both
// parts (>= its wait_ms), naming that waiter as the holder; the waiter is
// granted after the release landed, with a greater token. On both
// protocols.
func TestReviewWWaitedCountsRelease(t *testing.T) {
	for _, proto := range []string{"plugin", "native"} {
		t.Run(proto, func(t *testing.T) {
			root := testRoot(t)
			conn := rawConn(t)
			p := testenv.ProxyT(t, zkServer.Addr(1))
			acfg, bcfg := testConfig(t, root, "wv-a"), testConfig(t, root, "wv-b")
			acfg.ZKServers = []string{p.Addr()}
			acfg.LockProtocol, bcfg.LockProtocol = proto, proto
			a, b := start(t, acfg), start(t, bcfg)
			objPath := path.Join(root, "wv")

			l := a.acquire("wv", `{"lease_ms":60000}`)
			before := len(kidsOf(t, conn, objPath))
			w := acquireAsync(b, "wv", `{"wait_ms":8000,"lease_ms":60000}`)
			waitFor(t, 5*time.Second, "wv-b queued", func() bool { return len(kidsOf(t, conn, objPath)) > before })
			p.HoldUpstream()
			t.Cleanup(p.Heal)
			nowaitRelease(t, a, l)
			const waitMS = 2000
			x := acquireAsync(a, "wv", `{"wait_ms":2000}`)
			time.Sleep(time.Second)
			p.Heal()
			g := <-w
			if g.status != 200 {
				t.Fatalf("wv-b after the release: %d %s", g.status, g.body)
			}
			wl := decodeLease(t, g.body)
			if wl.Token <= l.Token {
				t.Errorf("wv-b granted token %d, not above %d", wl.Token, l.Token)
			}
			gx := <-x
			if gx.status != 423 {
				t.Fatalf("a's acquire while wv-b holds: %d %s, want 423", gx.status, gx.body)
			}
			e := decodeError(t, gx.body)
			if e.Kind != api.InstanceLockException || e.WaitedMS == nil || *e.WaitedMS < waitMS {
				t.Errorf("423 = %+v, want InstanceLockException with waited_ms >= %d (the wait for the release counted)", e, waitMS)
			}
			if e.Holder == nil || e.Holder.Sidecar != "wv-b" {
				t.Errorf("423 holder = %+v, want wv-b's lease", e.Holder)
			}
			b.release(wl.LeaseID)
		})
	}
}

// TestReviewWCallerGoneWhileWaiting: an acquire waiting for a no-wait
// release in flight (its write held back; the connection is not given up
// for ~6.7 s) whose caller goes away stops waiting at once: the sidecar's
// count of acquires in flight is back to 0 within 3 s, not after its 30 s
// wait or the release's end.
func TestReviewWCallerGoneWhileWaiting(t *testing.T) {
	root := testRoot(t)
	cfg, p := proxiedConfig(t, root, "wg-a")
	cfg.ZKSessionTimeout = 10 * time.Second
	a := start(t, cfg)

	l := a.acquire("wg", `{"lease_ms":60000}`)
	p.HoldUpstream()
	t.Cleanup(p.Heal)
	nowaitRelease(t, a, l)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		testenv.Call(ctx, a.hc, "POST", "/v1/locks/wg/acquire", `{"wait_ms":30000}`)
	}()
	waitFor(t, 5*time.Second, "the acquire in flight", func() bool { return a.metric("baton_acquires_in_flight") == 1 })
	cancel()
	<-done
	waitFor(t, 3*time.Second, "the acquire of the gone caller ended", func() bool { return a.metric("baton_acquires_in_flight") == 0 })
	p.Heal()
}
