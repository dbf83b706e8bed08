package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
)

// Review of f3fdd99 (an ask names its requester's request, Signal.Req, and
// Grant.LiveAsks counts it live while a node of that request waits under
// the object, in whichever session).

// noSession is a session id no server handed out.
const noSession = 0x7fff0000feedf00d

// reqLive reports whether the ask id is among hg's LiveAsks now.
func reqLive(t *testing.T, hg *lock.Grant, id string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, a := range hg.LiveAsks(ctx) {
		if a.ID == id {
			return true
		}
	}
	return false
}

// waitAsk waits until hg's holder watch has seen the ask id (LiveAsks
// works on the asks as last seen).
func waitAsk(t *testing.T, hg *lock.Grant, id string) {
	t.Helper()
	waitFor(t, 10*time.Second, "the holder saw the ask", func() bool {
		for _, a := range hg.Asks() {
			if a.ID == id {
				return true
			}
		}
		return false
	})
}

// reqObjPath is the object node's path under root.
func reqObjPath(t *testing.T, root, obj string) string {
	t.Helper()
	name, err := lock.EscapeObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	return root + "/" + name
}

// The case f3fdd99 fixes, end to end, with a real session loss: the
// requester asks (stamped with its session S1), S1 is lost before it
// queues, and it queues in S2 with the request id named in the ask. The
// holder's LiveAsks must keep the ask while the requester waits. Fails with
// f3fdd99's lock/grant.go reverted (only S1's nodes counted: none).
func TestReviewReqSessionLostBetweenAskAndQueue(t *testing.T) {
	t.Parallel()
	const obj = "RREQ-lost"
	root := testRoot(t, zkServer)
	h := newEngine(t, zkServer.Servers(), root)
	e := newEngine(t, zkServer.Servers(), root)
	hg := acquire(t, h, obj, lock.Foreground, lock.AcquireOptions{Preemptible: true, Cleanup: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()

	req := lock.NewRequestID()
	_, sig, err := e.Ask(ctx, obj, lock.Signal{Kind: "preempt-forceful", Req: req}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// LiveAsks works on the asks as the holder's watch last saw them (the
	// sidecar looks once the ask was delivered): wait for that.
	waitAsk(t, hg, sig.ID)
	s1 := sig.Session
	if s1 == 0 || s1 != e.Health().SessionID {
		t.Fatalf("the ask is stamped with session 0x%x, the engine's is 0x%x", s1, e.Health().SessionID)
	}
	e.FailSessionForTest(fmt.Errorf("%w: review: lost between the ask and the queueing", lock.ErrSessionLost))
	got := make(chan asyncResult, 1)
	go func() {
		g, err := e.Acquire(ctx, obj, lock.Foreground, lock.AcquireOptions{RequestID: req, Wait: 30 * time.Second})
		got <- asyncResult{g, err}
	}()
	// The requester's node appears under the object in the next session.
	conn := rawConn(t, zkServer.Servers())
	objPath := reqObjPath(t, root, obj)
	waitFor(t, 15*time.Second, "the requester queued in a new session", func() bool {
		kids, _, err := conn.Children(objPath)
		if err != nil {
			return false
		}
		for _, k := range kids {
			if k == "privateLock" {
				continue
			}
			d, st, err := conn.Get(objPath + "/" + k)
			if err == nil && st.EphemeralOwner != s1 && st.EphemeralOwner != h.Health().SessionID && strings.Contains(string(d), req) {
				return true
			}
		}
		return false
	})
	if s2 := e.Health().SessionID; s2 == s1 {
		t.Fatalf("still in session 0x%x", s1)
	}
	// Both looks forcefulRequesterWaits takes (a second apart) must find it.
	for i := range 2 {
		if !reqLive(t, hg, sig.ID) {
			d, _, _ := conn.Get(objPath + "/privateLock")
			t.Errorf("look %d: the holder's LiveAsks dropped the ask of a requester waiting in line in a new session (asks %+v; privateLock %s; kids %v)", i, hg.Asks(), d, children(t, conn, root, obj))
		}
		time.Sleep(time.Second)
	}
	release(t, hg)
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("the requester: %v", r.err)
		}
		if r.g.RequestID() != req {
			t.Errorf("the requester's grant has request id %q, want %q", r.g.RequestID(), req)
		}
		release(t, r.g)
	case <-time.After(30 * time.Second):
		t.Fatal("the requester was never granted")
	}
}

// Safety: a requester that is really gone (its engine closed: its session
// and its node gone) has its ask dropped although the ask names a request.
// Fails on a mutant that trusts a named request (a.Req != "" counts live).
func TestReviewReqGoneRequesterDropped(t *testing.T) {
	t.Parallel()
	const obj = "RREQ-gone"
	root := testRoot(t, zkServer)
	h := newEngine(t, zkServer.Servers(), root)
	r := newEngine(t, zkServer.Servers(), root)
	hg := acquire(t, h, obj, lock.Foreground, lock.AcquireOptions{})
	defer release(t, hg)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	req := lock.NewRequestID()
	_, sig, err := r.Ask(ctx, obj, lock.Signal{Kind: "preempt-forceful", Req: req}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := grantAsync(ctx, r, obj, lock.Foreground, lock.AcquireOptions{RequestID: req, Wait: 30 * time.Second})
	waitFor(t, 10*time.Second, "the requester's ask live while it waits", func() bool { return reqLive(t, hg, sig.ID) })
	_ = r.Close() // its sidecar stopped: session and node gone, the ask left behind
	if res := <-got; res.err == nil {
		t.Fatalf("the closed requester was granted")
	}
	waitFor(t, 15*time.Second, "the gone requester's ask dropped", func() bool { return !reqLive(t, hg, sig.ID) })
	found := false
	for _, a := range hg.Asks() {
		found = found || a.ID == sig.ID
	}
	if !found {
		t.Fatalf("the ask is not standing at all (withdrawn?): the test shows nothing")
	}
}

// Safety: the nodes under the object that are not the requester's must not
// make a dead requester's ask live: a plugin (Java-era) child whose data is
// not JSON, one with no data, one whose JSON names no request, privateLock
// (which names the holder's request), and a waiter of another object that
// carries the ask's request id. Asks: one of an earlier Baton (a session,
// no Req), one naming the other object's waiter's request. Fails on a mutant
// that drops both empty-id guards (reqs[""] from a non-JSON node, and
// a.Req == "" matching it).
func TestReviewReqForeignNodesNotRequesters(t *testing.T) {
	t.Parallel()
	const obj, other = "RREQ-foreign", "RREQ-foreign-other"
	root := testRoot(t, zkServer)
	h := newEngine(t, zkServer.Servers(), root)
	w := newEngine(t, zkServer.Servers(), root)
	hg := acquire(t, h, obj, lock.Foreground, lock.AcquireOptions{})
	defer release(t, hg)
	og := acquire(t, h, other, lock.Foreground, lock.AcquireOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()

	// A waiter of the other object with request id wreq.
	wreq := lock.NewRequestID()
	wch := grantAsync(ctx, w, other, lock.Foreground, lock.AcquireOptions{RequestID: wreq, Wait: 30 * time.Second})
	conn := rawConn(t, zkServer.Servers())
	waitFor(t, 10*time.Second, "the other object's waiter queued", func() bool { return len(children(t, conn, root, other)) >= 3 })

	// Plugin-style children of obj (ephemeral sequential "A-", as the
	// plugin names them), in the raw session.
	objPath := reqObjPath(t, root, obj)
	for _, data := range [][]byte{[]byte("10.0.0.7"), nil, []byte(`{"v":1,"sidecar":"x"}`), []byte(`{"req":""}`), []byte(`"` + wreq + `"`)} {
		if _, err := conn.Create(objPath+"/A-", data, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	_, old, err := h.Ask(ctx, obj, lock.Signal{Kind: "preempt-forceful", Session: noSession}, nil) // an earlier Baton's
	if err != nil {
		t.Fatal(err)
	}
	_, named, err := h.Ask(ctx, obj, lock.Signal{Kind: "preempt-forceful", Session: noSession + 1, Req: wreq}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitAsk(t, hg, old.ID)
	waitAsk(t, hg, named.ID)
	live := map[string]bool{}
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
	for _, a := range hg.LiveAsks(lctx) {
		live[a.ID] = true
	}
	lcancel()
	if live[old.ID] {
		t.Errorf("a dead requester's ask without a request id counted live beside plugin children whose data names no request")
	}
	if live[named.ID] {
		t.Errorf("a dead requester's ask counted live for a waiter of another object with its request id")
	}
	if len(hg.Asks()) != 2 {
		t.Fatalf("standing asks %+v, want 2", hg.Asks())
	}
	release(t, og)
	if r := <-wch; r.err == nil {
		release(t, r.g)
	}
}

// Children vanishing between LiveAsks' listing and its reads of them (other
// waiters giving up) are skipped, not taken as "cannot read": a dead
// requester's ask is still dropped. Fails on a mutant whose ErrNoNode
// returns all the asks (the conservative answer on any error).
func TestReviewReqChildrenVanishing(t *testing.T) {
	t.Parallel()
	const obj = "RREQ-vanish"
	root := testRoot(t, zkServer)
	h := newEngine(t, zkServer.Servers(), root)
	hg := acquire(t, h, obj, lock.Foreground, lock.AcquireOptions{})
	defer release(t, hg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, dead, err := h.Ask(ctx, obj, lock.Signal{Kind: "preempt-forceful", Session: noSession, Req: lock.NewRequestID()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitAsk(t, hg, dead.ID)
	conn := rawConn(t, zkServer.Servers())
	objPath := reqObjPath(t, root, obj)
	const n = 300
	for round := range 5 {
		ops := make([]any, 0, 100)
		for i := range n {
			ops = append(ops, &zk.CreateRequest{Path: objPath + "/A-", Data: []byte(`{"v":1,"req":"other"}`), Acl: zk.WorldACL(zk.PermAll), Flags: zk.FlagEphemeralSequential})
			if len(ops) == 100 || i == n-1 {
				if _, err := conn.Multi(ops...); err != nil {
					t.Fatal(err)
				}
				ops = ops[:0]
			}
		}
		kids, _, err := conn.Children(objPath)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			time.Sleep(2 * time.Millisecond) // after the listing, most likely
			for i := len(kids) - 1; i >= 0; i-- {
				if strings.HasPrefix(kids[i], "A-") {
					_ = conn.Delete(objPath+"/"+kids[i], -1)
				}
			}
		})
		close(start)
		live := reqLive(t, hg, dead.ID)
		wg.Wait()
		if live {
			t.Fatalf("round %d: a dead requester's ask counted live because other waiters left while LiveAsks read them", round)
		}
	}
}

// More than 1,000 children: every ask counts live (the documented
// conservative answer); 1,000 or fewer: the dead one is dropped. Pins the
// bound (a mutant with >= or a larger bound fails one side).
func TestReviewReqManyChildren(t *testing.T) {
	t.Parallel()
	const obj = "RREQ-many"
	root := testRoot(t, zkServer)
	h := newEngine(t, zkServer.Servers(), root)
	hg := acquire(t, h, obj, lock.Foreground, lock.AcquireOptions{})
	defer release(t, hg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, dead, err := h.Ask(ctx, obj, lock.Signal{Kind: "preempt-forceful", Session: noSession, Req: lock.NewRequestID()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitAsk(t, hg, dead.ID)
	conn := rawConn(t, zkServer.Servers())
	objPath := reqObjPath(t, root, obj)
	// privateLock and the holder's child are there: 998 more make 1,000.
	add := func(k int) {
		ops := make([]any, 0, 100)
		for i := range k {
			ops = append(ops, &zk.CreateRequest{Path: objPath + "/A-", Data: []byte("plugin"), Acl: zk.WorldACL(zk.PermAll), Flags: zk.FlagEphemeralSequential})
			if len(ops) == 100 || i == k-1 {
				if _, err := conn.Multi(ops...); err != nil {
					t.Fatal(err)
				}
				ops = ops[:0]
			}
		}
	}
	add(998)
	if kids, _, _ := conn.Children(objPath); len(kids) != 1000 {
		t.Fatalf("%d children, want 1000", len(kids))
	}
	if reqLive(t, hg, dead.ID) {
		t.Errorf("1,000 children: a dead requester's ask counted live")
	}
	add(1)
	if !reqLive(t, hg, dead.ID) {
		t.Errorf("1,001 children: the dead requester's ask was checked (the documented answer is all asks)")
	}
}

// The native protocol: asks are refused (ErrNotNative) whatever they name,
// a RequestID from NewRequestID gets the "~" suffix, and LiveAsks of a
// native grant answers (nothing standing) without touching the children.
func TestReviewReqNative(t *testing.T) {
	t.Parallel()
	const obj = "RREQ-native"
	root := testRoot(t, zkServer)
	nat := func(o *lock.Options) { o.Protocol = lock.Native }
	h := newEngine(t, zkServer.Servers(), root, nat)
	r := newEngine(t, zkServer.Servers(), root, nat)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := lock.NewRequestID()
	hg := acquire(t, h, obj, lock.Foreground, lock.AcquireOptions{RequestID: req})
	if !strings.HasPrefix(hg.RequestID(), req+"~") || len(hg.RequestID()) != len(req)+13 {
		t.Errorf("native grant's request id %q, want %q~ and 12 hex digits", hg.RequestID(), req)
	}
	if _, _, err := r.Ask(ctx, obj, lock.Signal{Kind: "preempt-forceful", Req: req}, nil); !errors.Is(err, lock.ErrNotNative) {
		t.Errorf("a native ask: %v, want ErrNotNative", err)
	}
	// The same caller id on another engine waits, with its own suffix.
	wch := grantAsync(ctx, r, obj, lock.Foreground, lock.AcquireOptions{RequestID: req, Wait: 20 * time.Second})
	if a := hg.LiveAsks(ctx); len(a) != 0 {
		t.Errorf("a native grant's LiveAsks %+v, want none", a)
	}
	release(t, hg)
	res := <-wch
	if res.err != nil {
		t.Fatalf("the second request with the same caller id: %v", res.err)
	}
	if res.g.RequestID() == hg.RequestID() || !strings.HasPrefix(res.g.RequestID(), req+"~") {
		t.Errorf("second grant's request id %q (first %q)", res.g.RequestID(), hg.RequestID())
	}
	release(t, res.g)
}

// A requester on the holder's own engine (another client of the holder's
// sidecar) asks, queues with the named request and gives up, its ask left
// standing (the sidecar's withdraw failed: "the holder stays preempted until
// its cleanup window ends"). Its request has no node any more, but the
// ask's session does (the holder's own child), so LiveAsks counts it live
// and a forceful preemption takes the holder for nobody. Now that an ask
// names its request, the session need not be consulted for it. Fails on
// f3fdd99 (and before it): a design gap, not a regression.
func TestReviewReqNamedRequestGoneSessionStays(t *testing.T) {
	t.Parallel()
	const obj = "RREQ-samesess"
	root := testRoot(t, zkServer)
	h := newEngine(t, zkServer.Servers(), root)
	hg := acquire(t, h, obj, lock.Foreground, lock.AcquireOptions{})
	defer release(t, hg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := lock.NewRequestID()
	_, sig, err := h.Ask(ctx, obj, lock.Signal{Kind: "preempt-forceful", Req: req}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sig.Session != h.Health().SessionID {
		t.Fatalf("ask stamped 0x%x, the engine's session 0x%x", sig.Session, h.Health().SessionID)
	}
	waitAsk(t, hg, sig.ID)
	if _, err := h.Acquire(ctx, obj, lock.Foreground, lock.AcquireOptions{RequestID: req, Wait: 300 * time.Millisecond}); err == nil {
		t.Fatal("granted while held")
	}
	conn := rawConn(t, zkServer.Servers())
	objPath := reqObjPath(t, root, obj)
	waitFor(t, 10*time.Second, "the requester's node gone", func() bool {
		kids, _, err := conn.Children(objPath)
		if err != nil {
			return false
		}
		for _, k := range kids {
			if d, _, err := conn.Get(objPath + "/" + k); err == nil && k != "privateLock" && strings.Contains(string(d), req) {
				return false
			}
		}
		return true
	})
	if reqLive(t, hg, sig.ID) {
		t.Errorf("an ask whose named request has no node (its requester gave up) counts live: its session has the holder's own node")
	}
}
