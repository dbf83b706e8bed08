package sidecar_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
)

// lock_delay_ms out of range (or of the wrong type) is a 400 naming it, and
// nothing is created.
func TestLockDelayBadInput(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	s := start(t, testConfig(t, root, "sc-a"))
	for _, body := range []string{`{"lock_delay_ms":-1}`, `{"lock_delay_ms":600001}`, `{"lock_delay_ms":"5s"}`, `{"lock_delay_ms":1.5}`} {
		st, b := s.call("POST", "/v1/locks/ld/acquire", body)
		if st != 400 {
			t.Fatalf("%s: %d %s, want 400", body, st, b)
		}
		if e := decodeError(t, b); e.Kind != api.BadRequest || e.Field != "lock_delay_ms" {
			t.Fatalf("%s: %+v, want BadRequest naming lock_delay_ms", body, e)
		}
	}
	if left := nodesUnder(t, conn, root); len(left) != 0 {
		t.Fatalf("nodes created by refused acquires: %v", left)
	}
	s.release(s.acquire("ld", `{"lock_delay_ms":600000}`).LeaseID) // the bound itself is fine
}

// Through the API: a holder whose privateLock vanishes (deleted behind its
// back, as a session expiry does) is followed by a waiter with lock_delay_ms
// no earlier than that delay, and baton_lock_delays_total counts it; a clean
// release after that is not delayed (the counter stays), also for a waiter
// with the sidecar's zookeeper.lock.delay.
func TestLockDelayThroughAPI(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	holder := start(t, testConfig(t, root, "sc-h"))
	wcfg := testConfig(t, root, "sc-w")
	wcfg.LockDelay = time.Minute // the property: overridden below, used by the last waiter
	waiter := start(t, wcfg)
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	h := holder.acquire("ld2", `{}`)
	got := make(chan api.Lease, 1)
	go func() { got <- waiter.acquire("ld2", `{"lock_delay_ms":1500,"wait_ms":30000}`) }()
	waitFor(t, 10*time.Second, "waiter queued", func() bool {
		kids, _, _ := conn.Children(root + "/ld2")
		return len(kids) == 3
	})
	time.Sleep(100 * time.Millisecond)
	if err := conn.Delete(root+"/ld2/privateLock", -1); err != nil { // the holder vanished
		t.Fatal(err)
	}
	gone := time.Now()
	l := <-got
	if after := l.AcquiredAt.Sub(gone); after < 1300*time.Millisecond {
		t.Fatalf("granted %v after the holder vanished, want ≥ 1.5 s (lock_delay_ms)", after)
	}
	if n := waiter.metric("baton_lock_delays_total"); n != 1 {
		t.Fatalf("baton_lock_delays_total = %v, want 1", n)
	}
	if l.Token <= h.Token {
		t.Fatalf("token %d after %d", l.Token, h.Token)
	}
	holder.call("DELETE", "/v1/leases/"+h.LeaseID, "") // lost: 410 or 404, either way gone

	// A clean release hands over at once, with the property's minute.
	next := make(chan api.Lease, 1)
	go func() { next <- waiter.acquire("ld2", `{"wait_ms":30000}`) }()
	waitFor(t, 10*time.Second, "second waiter queued", func() bool {
		kids, _, _ := conn.Children(root + "/ld2")
		return len(kids) == 3
	})
	waiter.release(l.LeaseID)
	l2 := <-next
	if n := waiter.metric("baton_lock_delays_total"); n != 1 {
		t.Fatalf("after a clean release baton_lock_delays_total = %v, want still 1", n)
	}
	waiter.release(l2.LeaseID)
}

// GET /v1/locks/{object} shows a background waiter that aged ("aged":true)
// ahead of a foreground waiter that arrived after that, and it is granted
// first.
func TestLockStatusShowsAged(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	bcfg := testConfig(t, root, "sc-b")
	bcfg.BackgroundMaxWait = 200 * time.Millisecond
	b := start(t, bcfg)
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	h := a.acquire("ag", `{}`)
	order := make(chan string, 2)
	leases := make(chan api.Lease, 2)
	go func() {
		l := b.acquire("ag", `{"type":"background","wait_ms":30000}`)
		order <- "background"
		leases <- l
	}()
	status := func() api.LockStatus {
		var st api.LockStatus
		if err := json.Unmarshal(a.mustCall(200, "GET", "/v1/locks/ag", ""), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	waitFor(t, 10*time.Second, "background waiter", func() bool { return len(status().Waiters) == 1 })
	time.Sleep(400 * time.Millisecond) // past its bound, on any clock
	go func() {
		l := a.acquire("ag", `{"wait_ms":30000}`)
		order <- "foreground"
		leases <- l
	}()
	waitFor(t, 10*time.Second, "foreground waiter", func() bool { return len(status().Waiters) == 2 })
	st := status()
	if w := st.Waiters; w[0].Type != "background" || !w[0].Aged || w[1].Type != "foreground" || w[1].Aged {
		t.Fatalf("waiters %+v, want the aged background one first", w)
	}
	a.release(h.LeaseID)
	first := <-order
	l := <-leases
	if first != "background" {
		t.Fatalf("granted first: %s, want background", first)
	}
	if l.Type == api.Background {
		b.release(l.LeaseID)
	}
	<-order
	l2 := <-leases
	a.release(l2.LeaseID)
}

// A lease that expires (its holder stopped renewing: it may be paused, not
// gone) is not a release: a waiter with lock_delay_ms waits out the delay.
func TestLockDelayAfterLeaseExpiry(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	holder := start(t, testConfig(t, root, "sc-h"))
	waiter := start(t, testConfig(t, root, "sc-w"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })
	holder.acquire("ld3", `{"lease_ms":500}`)
	ok, _, ev, err := conn.ExistsW(root + "/ld3/privateLock")
	if err != nil || !ok {
		t.Fatalf("privateLock: %v %v", ok, err)
	}
	got := make(chan api.Lease, 1)
	go func() { got <- waiter.acquire("ld3", `{"lock_delay_ms":1000,"wait_ms":30000}`) }()
	<-ev // the lease expired and its sidecar freed the lock
	gone := time.Now()
	l := <-got
	if after := l.AcquiredAt.Sub(gone); after < 900*time.Millisecond || waiter.metric("baton_lock_delays_total") != 1 {
		t.Fatalf("granted %v after the expired lease's lock was freed, %v lock delays; want ≥ 1 s and 1", after, waiter.metric("baton_lock_delays_total"))
	}
	waiter.release(l.LeaseID)
}
