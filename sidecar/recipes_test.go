package sidecar_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
)

// checker is an overlap and fencing checker per object: enter fails when
// more than max holders are inside, or a token is not above the last one
// seen on the object.
type checker struct {
	mu     sync.Mutex
	inside map[string]int
	last   map[string]int64
	max    int
	peak   int
	errs   []string
}

func newChecker(limit int) *checker {
	return &checker{inside: map[string]int{}, last: map[string]int64{}, max: limit}
}

func (c *checker) enter(obj string, token int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inside[obj]++
	c.peak = max(c.peak, c.inside[obj])
	if c.inside[obj] > c.max {
		c.errs = append(c.errs, fmt.Sprintf("%d holders inside %q, at most %d", c.inside[obj], obj, c.max))
	}
	if c.max == 1 && token <= c.last[obj] {
		c.errs = append(c.errs, fmt.Sprintf("token %d on %q after %d: not increasing", token, obj, c.last[obj]))
	}
	c.last[obj] = max(c.last[obj], token)
}

func (c *checker) count(obj string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inside[obj]
}

func (c *checker) leave(obj string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inside[obj]--
}

func (c *checker) report(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.errs {
		t.Error(e)
	}
}

// TestSetCrossing: two requests for the same set in opposite orders
// ([a,b] on one sidecar, [b,a] on another), in loops, against holders of
// a alone and b alone: every request finishes (no deadlock: the engine
// acquires in canonical order) and no object ever has two holders at once,
// nor a token that does not increase (checker on each object).
func TestSetCrossing(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })
	chk := newChecker(1)
	const rounds = 6
	var wg sync.WaitGroup
	var sets atomic.Int32
	hold := func(via *sc, path, body string) {
		st, raw := via.call("POST", path, body)
		if st != 200 {
			t.Errorf("POST %s %s = %d %s", path, body, st, raw)
			return
		}
		var l api.Lease
		if err := json.Unmarshal(raw, &l); err != nil {
			t.Errorf("lease: %v: %s", err, raw)
			return
		}
		held := []api.LeaseObject{{Object: l.Object, Token: l.Token, Node: l.Node}}
		if l.Objects != nil {
			held = l.Objects
			sets.Add(1)
		}
		for _, o := range held {
			chk.enter(o.Object, o.Token)
		}
		time.Sleep(5 * time.Millisecond) // hold it a little: gives overlaps a chance
		for _, o := range held {
			chk.leave(o.Object)
		}
		if st, raw := via.call("DELETE", "/v1/leases/"+l.LeaseID, ""); st != 200 {
			t.Errorf("release %s = %d %s", l.LeaseID, st, raw)
		}
	}
	for _, w := range []struct {
		via        *sc
		path, body string
	}{
		{a, "/v1/locks/acquire", `{"objects":["a","b"],"wait_ms":60000}`},
		{b, "/v1/locks/acquire", `{"objects":["b","a"],"wait_ms":60000}`},
		{a, "/v1/locks/a/acquire", `{"wait_ms":60000}`},
		{b, "/v1/locks/b/acquire", `{"wait_ms":60000}`},
	} {
		wg.Go(func() {
			for range rounds {
				hold(w.via, w.path, w.body)
			}
		})
	}
	wg.Wait()
	chk.report(t)
	if n := sets.Load(); n != 2*rounds {
		t.Errorf("%d sets granted, want %d", n, 2*rounds)
	}
}

// TestSetLease: a set's lease lists each object with its own token (in
// canonical order, Object/Token the first's); a revocation of one object
// (through another sidecar) makes the set's lease lost (renewal 410) and
// its other object is freed only after the validity told to the holder;
// a release frees every object at once.
func TestSetLease(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	l := decodeLease(t, a.mustCall(200, "POST", "/v1/locks/acquire", `{"objects":["y","x"],"lease_ms":3000}`))
	if len(l.Objects) != 2 || l.Objects[0].Object != "x" || l.Objects[1].Object != "y" || l.Object != "x" || l.Token != l.Objects[0].Token ||
		l.Objects[0].Token == l.Objects[1].Token {
		t.Fatalf("set lease = %+v, want objects x then y, each with its own token, Object/Token x's", l)
	}
	for _, o := range l.Objects { // each object's holder is this set's node
		var st api.LockStatus
		if err := json.Unmarshal(b.mustCall(200, "GET", "/v1/locks/"+o.Object, ""), &st); err != nil || st.Holder == nil || st.Holder.Token != o.Token {
			t.Fatalf("GET /v1/locks/%s: %+v %v, want holder token %d", o.Object, st, err, o.Token)
		}
	}
	time.Sleep(100 * time.Millisecond) // past the holder watch's arming delay
	told := decodeLease(t, a.mustCall(200, "POST", "/v1/leases/"+l.LeaseID+"/renew", ""))
	b.mustCall(202, "POST", "/v1/locks/y/revoke", fmt.Sprintf(`{"reason":"test","token":"%d"}`, l.Objects[1].Token))
	waitFor(t, 10*time.Second, "set lease lost", func() bool {
		st, _ := a.call("POST", "/v1/leases/"+l.LeaseID+"/renew", "")
		return st == 410
	})
	e := decodeError(t, a.mustCall(410, "POST", "/v1/leases/"+l.LeaseID+"/renew", ""))
	if !strings.HasPrefix(e.Reason, api.ReasonRevoked) {
		t.Errorf("renewal after the revocation: reason %q, want %q…", e.Reason, api.ReasonRevoked)
	}
	x := decodeLease(t, b.mustCall(200, "POST", "/v1/locks/x/acquire", `{"wait_ms":30000}`))
	if x.AcquiredAt.Before(told.ValidUntil.Time) {
		t.Errorf("x granted at %v, before the set's told valid_until %v", x.AcquiredAt, told.ValidUntil)
	}
	b.release(x.LeaseID)

	// One object's node deleted under the holder: the set is lost, and
	// its other object is freed after the validity told (not at once,
	// not never).
	d := decodeLease(t, a.mustCall(200, "POST", "/v1/locks/acquire", `{"objects":["m","n"],"lease_ms":3000}`))
	time.Sleep(100 * time.Millisecond) // past the holder watch's arming delay
	told = decodeLease(t, a.mustCall(200, "POST", "/v1/leases/"+d.LeaseID+"/renew", ""))
	if err := conn.Delete(root+"/m/privateLock", -1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "set lease lost", func() bool {
		st, _ := a.call("POST", "/v1/leases/"+d.LeaseID+"/renew", "")
		return st == 410
	})
	if e := decodeError(t, a.mustCall(410, "GET", "/v1/leases/"+d.LeaseID, "")); e.Reason != api.ReasonLockDeleted {
		t.Errorf("lost set: reason %q, want %q", e.Reason, api.ReasonLockDeleted)
	}
	n := decodeLease(t, b.mustCall(200, "POST", "/v1/locks/n/acquire", `{"wait_ms":30000}`))
	if n.AcquiredAt.Before(told.ValidUntil.Time) {
		t.Errorf("n granted at %v, before the set's told valid_until %v", n.AcquiredAt, told.ValidUntil)
	}
	b.release(n.LeaseID)

	// Revoked through the holder's own sidecar: it finds the set's lease
	// by the member's token (local, freed after the validity told).
	u := decodeLease(t, a.mustCall(200, "POST", "/v1/locks/acquire", `{"objects":["u","v"],"lease_ms":2000}`))
	var rv api.RevokeResponse
	if err := json.Unmarshal(a.mustCall(202, "POST", "/v1/locks/v/revoke", `{"reason":"local"}`), &rv); err != nil || !rv.Local || rv.FreedAfter == nil ||
		rv.Token != u.Objects[1].Token {
		t.Errorf("revoke of a set's member through its sidecar = %+v %v, want local, freed_after, the member's token", rv, err)
	}
	if e := decodeError(t, a.mustCall(410, "POST", "/v1/leases/"+u.LeaseID+"/renew", "")); !strings.HasPrefix(e.Reason, api.ReasonRevoked) {
		t.Errorf("renewal of the revoked set: reason %q", e.Reason)
	}
	b.release(b.acquire("u", `{"wait_ms":30000}`).LeaseID)

	s := decodeLease(t, a.mustCall(200, "POST", "/v1/locks/acquire", `{"objects":["p","q","r"]}`))
	a.release(s.LeaseID)
	for _, o := range []string{"p", "q", "r"} { // free at once: a try-once acquire gets each
		b.release(b.acquire(o, `{"wait_ms":0}`).LeaseID)
	}
}

// TestSemaphoreSidecar: a semaphore of 2 across two sidecars with three
// holders each in loops is never held more than twice at once (checker);
// then with two holders a third request waits, GET /v1/semaphores/{name}
// shows both holders and the waiter, and a release gives the waiter the
// permit released.
func TestSemaphoreSidecar(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	chk := newChecker(2)
	var wg sync.WaitGroup
	for _, via := range []*sc{a, a, a, b, b, b} {
		wg.Go(func() {
			for range 4 {
				st, raw := via.call("POST", "/v1/semaphores/pool/acquire", `{"permits":2,"wait_ms":60000}`)
				if st != 200 {
					t.Errorf("semaphore acquire = %d %s", st, raw)
					return
				}
				var l api.Lease
				if err := json.Unmarshal(raw, &l); err != nil || l.Semaphore != "pool" || l.Permit == nil || *l.Permit > 1 ||
					l.Object != fmt.Sprintf("%spool/permit-%d", lock.SemaphorePrefix, *l.Permit) {
					t.Errorf("semaphore lease = %s (%v), want semaphore pool, permit 0 or 1, its object", raw, err)
					return
				}
				chk.enter("pool", l.Token)
				// Stay until a second holder is inside (bounded), and a
				// little more: the limit is reached each round, and a third
				// holder (a request waits all the time) would be seen.
				for end := time.Now().Add(time.Second); chk.count("pool") < 2 && time.Now().Before(end); {
					time.Sleep(2 * time.Millisecond)
				}
				time.Sleep(20 * time.Millisecond)
				chk.leave("pool")
				if st, raw := via.call("DELETE", "/v1/leases/"+l.LeaseID, ""); st != 200 {
					t.Errorf("release = %d %s", st, raw)
				}
			}
		})
	}
	wg.Wait()
	chk.report(t)
	if chk.peak != 2 {
		t.Errorf("at most %d holders at once, want 2 (the limit was never reached: the test shows nothing)", chk.peak)
	}

	h1 := decodeLease(t, a.mustCall(200, "POST", "/v1/semaphores/pool/acquire", `{"permits":2,"info":"h1"}`))
	h2 := decodeLease(t, b.mustCall(200, "POST", "/v1/semaphores/pool/acquire", `{"permits":2,"info":"h2"}`))
	if *h1.Permit == *h2.Permit {
		t.Fatalf("two holders of permit %d", *h1.Permit)
	}
	third := make(chan api.Lease, 1)
	go func() {
		st, raw := b.call("POST", "/v1/semaphores/pool/acquire", `{"permits":2,"info":"third","wait_ms":30000}`)
		var l api.Lease
		if st != 200 || json.Unmarshal(raw, &l) != nil {
			t.Errorf("third acquire = %d %s", st, raw)
		}
		third <- l
	}()
	var ss api.SemaphoreStatus
	waitFor(t, 10*time.Second, "the third request waiting", func() bool {
		if err := json.Unmarshal(a.mustCall(200, "GET", "/v1/semaphores/pool", ""), &ss); err != nil {
			t.Fatal(err)
		}
		return len(ss.Waiters) > 0
	})
	if ss.Name != "pool" || len(ss.Holders) != 2 || ss.Holders[0].Holder.Info != "h1" && ss.Holders[1].Holder.Info != "h1" ||
		ss.Waiters[0].Info != "third" {
		t.Errorf("GET /v1/semaphores/pool = %+v, want holders h1 and h2, waiter third", ss)
	}
	select {
	case l := <-third:
		t.Fatalf("the third was granted while two held: %+v", l)
	case <-time.After(200 * time.Millisecond):
	}
	a.release(h1.LeaseID)
	l := <-third
	if l.Permit == nil || *l.Permit != *h1.Permit {
		t.Errorf("the third got %+v, want permit %d (released)", l.Permit, *h1.Permit)
	}
	b.release(h2.LeaseID)
	b.release(l.LeaseID)
	if err := json.Unmarshal(a.mustCall(200, "GET", "/v1/semaphores/pool", ""), &ss); err != nil || len(ss.Holders) != 0 || len(ss.Waiters) != 0 {
		t.Errorf("GET after the releases = %+v %v, want no holders or waiters", ss, err)
	}
}

// TestRecipeRefusals: each bad request of a set or a semaphore is a 400
// naming its field.
func TestRecipeRefusals(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "sc-a"))
	many := make([]string, lock.MaxObjectsPerAcquire+1)
	for i := range many {
		many[i] = fmt.Sprintf("o%d", i)
	}
	manyJSON, _ := json.Marshal(many)
	for _, c := range []struct{ path, body, field string }{
		{"/v1/locks/acquire", `{}`, "objects"},
		{"/v1/locks/acquire", `{"objects":[]}`, "objects"},
		{"/v1/locks/acquire", `{"objects":["a","a"]}`, "objects"},
		{"/v1/locks/acquire", `{"objects":["a",""]}`, "objects"},
		{"/v1/locks/acquire", `{"objects":` + string(manyJSON) + `}`, "objects"},
		{"/v1/locks/acquire", `{"objects":[".semaphore/s/permit-0"]}`, "objects"},
		{"/v1/locks/acquire", `{"objects":["a"],"permits":2}`, "permits"},
		{"/v1/locks/acquire", `{"objects":["a"],"preemptible":true}`, "preemptible"},
		{"/v1/locks/acquire", `{"objects":["a"],"preempt":true,"wait_ms":9000}`, "preempt"},
		{"/v1/locks/acquire", `{"objects":["a"],"lease_id":"x"}`, "lease_id"},
		{"/v1/locks/a/acquire", `{"objects":["a","b"]}`, "objects"},
		{"/v1/locks/a/acquire", `{"permits":2}`, "permits"},
		{"/v1/locks/.semaphore%2Fs%2Fpermit-0/acquire", `{}`, "object"},
		{"/v1/semaphores/s/acquire", `{}`, "permits"},
		{"/v1/semaphores/s/acquire", `{"permits":0}`, "permits"},
		{"/v1/semaphores/s/acquire", fmt.Sprintf(`{"permits":%d}`, lock.MaxPermits+1), "permits"},
		{"/v1/semaphores/s/acquire", `{"permits":-1}`, "permits"},
		{"/v1/semaphores/a%2Fb/acquire", `{"permits":2}`, "name"},
		{"/v1/semaphores/s/acquire", `{"permits":2,"objects":["a"]}`, "objects"},
		{"/v1/semaphores/s/acquire", `{"permits":2,"preemptible":true}`, "preemptible"},
		{"/v1/semaphores/s/acquire", `{"permits":2,"lease_id":"x"}`, "lease_id"},
	} {
		st, raw := s.call("POST", c.path, c.body)
		if st != 400 {
			t.Errorf("POST %s %s = %d %s, want 400", c.path, c.body, st, raw)
			continue
		}
		if e := decodeError(t, raw); e.Field != c.field {
			t.Errorf("POST %s %s: field %q (%s), want %q", c.path, c.body, e.Field, e.Message, c.field)
		}
	}
	if st, raw := s.call("GET", "/v1/semaphores/a%2Fb", ""); st != 400 || decodeError(t, raw).Field != "name" {
		t.Errorf("GET /v1/semaphores/a%%2Fb = %d %s, want 400 naming name", st, raw)
	}
	// A set's lease is not re-entered through an object of the set.
	l := decodeLease(t, s.mustCall(200, "POST", "/v1/locks/acquire", `{"objects":["a","b"]}`))
	if e := decodeError(t, s.mustCall(400, "POST", "/v1/locks/a/acquire", `{"lease_id":"`+l.LeaseID+`"}`)); e.Field != "lease_id" {
		t.Errorf("re-entry of a set: field %q, want lease_id", e.Field)
	}
	s.release(l.LeaseID)
}

// TestRecipeBoundsAgree: the bounds the API documents are the engine's.
func TestRecipeBoundsAgree(t *testing.T) {
	if api.MaxPermits != lock.MaxPermits || api.MaxObjectsPerAcquire != lock.MaxObjectsPerAcquire {
		t.Errorf("api bounds %d permits, %d objects; lock's %d, %d", api.MaxPermits, api.MaxObjectsPerAcquire, lock.MaxPermits, lock.MaxObjectsPerAcquire)
	}
}
