package sidecar_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
)

// TestTwoSidecarsExclude: two sidecars (own engines and sessions) never
// hand out one object to two holders at a time; tokens strictly increase.
func TestTwoSidecarsExclude(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	var (
		mu       sync.Mutex
		inside   int
		overlaps int
		last     int64
		badTok   int
		grants   int
	)
	var wg sync.WaitGroup
	for i, s := range []*sc{a, a, b, b} {
		wg.Go(func() {
			for j := range 5 {
				st, body := s.call("POST", "/v1/locks/shared/acquire", fmt.Sprintf(`{"wait_ms":60000,"info":"w%d-%d"}`, i, j))
				if st != 200 {
					t.Errorf("acquire: %d %s", st, body)
					return
				}
				var l api.Lease
				_ = json.Unmarshal(body, &l)
				mu.Lock()
				inside++
				if inside != 1 {
					overlaps++
				}
				if l.Token <= last {
					badTok++
				}
				last = l.Token
				grants++
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // hold it for a moment
				mu.Lock()
				inside--
				mu.Unlock()
				if st, body := s.call("DELETE", "/v1/leases/"+l.LeaseID, ""); st != 200 {
					t.Errorf("release: %d %s", st, body)
				}
			}
		})
	}
	wg.Wait()
	if overlaps != 0 || badTok != 0 || grants != 20 {
		t.Errorf("%d grants, %d overlapping, %d with a token not above the previous", grants, overlaps, badTok)
	}
}

// TestForegroundBeforeBackgroundAcrossSidecars is seed scenario 3 across
// sidecars: a foreground waiter on one sidecar is served before an earlier
// background waiter on another.
func TestForegroundBeforeBackgroundAcrossSidecars(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	holder := a.acquire("s3", `{"info":"holder"}`)
	type grant struct {
		who string
		l   api.Lease
	}
	granted := make(chan grant, 2)
	waitIn := func(s *sc, who, body string) {
		st, raw := s.call("POST", "/v1/locks/s3/acquire", body)
		if st != 200 {
			t.Errorf("%s acquire: %d %s", who, st, raw)
			granted <- grant{who: who}
			return
		}
		var l api.Lease
		_ = json.Unmarshal(raw, &l)
		granted <- grant{who, l}
	}
	waiters := func() []api.Waiter {
		var st api.LockStatus
		_ = json.Unmarshal(a.mustCall(200, "GET", "/v1/locks/s3", ""), &st)
		return st.Waiters
	}
	go waitIn(b, "background", `{"type":"background","wait_ms":60000,"info":"bg"}`)
	waitFor(t, 10*time.Second, "the background waiter queued", func() bool { return len(waiters()) == 1 })
	go waitIn(a, "foreground", `{"type":"foreground","wait_ms":60000,"info":"fg"}`)
	waitFor(t, 10*time.Second, "the foreground waiter queued", func() bool { return len(waiters()) == 2 })
	ws := waiters()
	if ws[0].Type != "foreground" || ws[0].Sidecar != "sc-a" || ws[1].Type != "background" || ws[1].Sidecar != "sc-b" {
		t.Errorf("waiters in grant order = %+v, want the foreground one first", ws)
	}
	a.release(holder.LeaseID)
	first := <-granted
	if first.who != "foreground" {
		t.Fatalf("first granted: %s, want foreground", first.who)
	}
	// The background waiter stays queued behind the foreground holder.
	if ws := waiters(); len(ws) != 1 || ws[0].Type != "background" {
		t.Errorf("after the foreground grant, waiters = %+v", ws)
	}
	a.release(first.l.LeaseID)
	second := <-granted
	if second.who != "background" || second.l.Token <= first.l.Token {
		t.Errorf("second grant %s token %d, want background with a token above %d", second.who, second.l.Token, first.l.Token)
	}
	b.release(second.l.LeaseID)
}

// Test423AcrossSidecars: a wait that runs out answers 423 with the holder
// (of the other sidecar) and the position, and leaves no node behind.
func Test423AcrossSidecars(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	h := a.acquire("p", `{"info":"holding p"}`)
	before := nodesUnder(t, conn, root)

	check := func(body string, wantPos int) {
		t.Helper()
		e := decodeError(t, b.mustCall(423, "POST", "/v1/locks/p/acquire", body))
		if e.Kind != api.InstanceLockException || e.Object != "p" || e.Position == nil || *e.Position != wantPos {
			t.Errorf("423 = %+v, want position %d", e, wantPos)
		}
		if e.Holder == nil || e.Holder.Sidecar != "sc-a" || e.Holder.Node != h.Node || e.Holder.Token != h.Token || e.Holder.Info != "holding p" {
			t.Errorf("423 holder = %+v, want sc-a's %s", e.Holder, h.Node)
		}
	}
	check(`{"wait_ms":200}`, 1)
	check(`{"wait_ms":0,"type":"background"}`, 1)
	if after := nodesUnder(t, conn, root); !slices.Equal(after, before) {
		t.Errorf("nodes after the 423s: %v, before: %v", after, before)
	}

	// With a waiter ahead, the position is 2.
	queued := make(chan api.Lease, 1)
	go func() {
		st, raw := b.call("POST", "/v1/locks/p/acquire", `{"wait_ms":60000}`)
		var l api.Lease
		if st != 200 || json.Unmarshal(raw, &l) != nil {
			t.Errorf("queued acquire: %d %s", st, raw)
		}
		queued <- l
	}()
	waitFor(t, 10*time.Second, "a waiter", func() bool {
		var st api.LockStatus
		_ = json.Unmarshal(a.mustCall(200, "GET", "/v1/locks/p", ""), &st)
		return len(st.Waiters) == 1
	})
	check(`{"wait_ms":200}`, 2)
	a.release(h.LeaseID)
	l := <-queued
	if l.LeaseID != "" {
		b.release(l.LeaseID)
	}
}
