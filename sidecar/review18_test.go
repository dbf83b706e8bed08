package sidecar_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/sidecar"
	"github.com/batonhq/baton/testenv"
)

// preemptibleHolderAndEngine starts a sidecar whose lease on obj is
// preemptible (a 2 s cleanup window), a long-poll of that lease (p), and a
// bare engine on the same root (node id nodeID, connected; closed at the
// test's end if the caller has not) to write asks as a requester's sidecar
// would.
func preemptibleHolderAndEngine(t *testing.T, obj, nodeID string) (*sc, api.Lease, <-chan api.Lease, *lock.Engine) {
	t.Helper()
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	h := a.acquire(obj, `{"preemptible":true,"cleanup_ms":2000,"lease_ms":60000}`)
	time.Sleep(100 * time.Millisecond) // past the holder watch's arming delay
	p := pollLease(t, a, h.LeaseID, 20000)

	e, err := lock.New(lock.Options{Servers: zkServer.Servers(), Root: root, SessionTimeout: 4 * time.Second,
		TickTime: testenv.DefaultTickTime, Logger: testLogger(t), NodeID: nodeID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	waitFor(t, 20*time.Second, "requester engine connected", func() bool { return e.Health().Connected })
	return a, h, p, e
}

// TestReview18DeadRequesterTakes (review of issue 18 §3): a forceful
// preemption whose requester is gone without withdrawing its ask (its
// sidecar crashed, was SIGKILLed or lost its session after the ask was
// written — here a bare engine writes exactly what askToYield writes and
// closes without Withdraw) still takes the holder when its cleanup window
// ends, although nobody waits for the lock any more. The ask is tied to
// nothing of the requester's (no ephemeral node, no session), so a dead
// requester's ask stands for the whole life of the grant.
func TestReview18DeadRequesterTakes(t *testing.T) {
	a, h, p, e := preemptibleHolderAndEngine(t, "dead", "sc-dead")
	if _, _, err := e.Ask(context.Background(), "dead", lock.Signal{Kind: sidecar.SignalPreemptForceful,
		Reason: "a requester about to crash", Who: "uid=0 pid=1", WaitMS: 20000}, nil); err != nil {
		t.Fatal(err)
	}
	e.Close() // the requester's sidecar is gone: its waiting node with it, its ask not
	if l := <-p; l.State != api.StatePreempted {
		t.Fatalf("holder: %+v, want preempted", l)
	}
	// Past the end of the cleanup window (2 s): nobody wants the lock.
	l := <-pollLease(t, a, h.LeaseID, 5000)
	if l.State != api.StateHeld {
		t.Errorf("holder after its cleanup window, its only requester dead: %+v, want held (a dead requester's ask withdrawn, not acted on)", l)
		return
	}
	a.release(h.LeaseID)
}

// TestReview18OverlapWithdrawChurn (review of issue 18 §3): the
// overlap/fencing checker of TestYieldUnderLoad with preempting requesters
// that give up: on two sidecars, preemptible holders (some stuck: they
// ignore being preempted and keep renewing, some re-enter) and preempting
// requesters — forceful or not — whose client goes away after a random
// time, so that withdrawals race the forceful take at the end of the
// holder's cleanup window, other requesters' asks, renewals and releases.
// Per object, in token order, no grant's window (acquired_at to the
// earliest of its release and the latest valid_until told) may begin before
// the previous one ended.
func TestReview18OverlapWithdrawChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })
	objs := []string{"o1", "o2"}

	type window struct {
		obj        string
		token      int64
		start, end time.Time
		how        string
	}
	var (
		mu      sync.Mutex
		windows []window
		counts  = map[string]int{}
	)
	note := func(w window) {
		mu.Lock()
		windows = append(windows, w)
		counts[w.how]++
		mu.Unlock()
	}
	stop := make(chan struct{})
	var gaveUp atomic.Int64
	var wg sync.WaitGroup
	for i := range 10 {
		s := []*sc{a, b}[i%2]
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 18))
			for {
				select {
				case <-stop:
					return
				default:
				}
				obj := objs[r.IntN(len(objs))]
				preempter := i%3 == 0
				stuck := !preempter && r.IntN(3) == 0
				body := `{"type":"foreground","preemptible":true,"cleanup_ms":400,"wait_ms":3000,"lease_ms":60000}`
				if preempter {
					// lease_ms 2000: a grant whose client went away just as it
					// was answered is held by nobody until its lease ends
					body = `{"preempt":true,"wait_ms":3000,"lease_ms":2000}`
					if r.IntN(2) == 0 {
						body = `{"preempt":true,"forceful":true,"wait_ms":3000,"lease_ms":2000}`
					}
				}
				ctx, cancel := context.WithCancel(context.Background())
				if preempter && r.IntN(2) == 0 { // gives up around the end of a cleanup window
					time.AfterFunc(time.Duration(300+r.IntN(300))*time.Millisecond, cancel)
				}
				st, raw := testenv.Call(ctx, s.hc, "POST", "/v1/locks/"+obj+"/acquire", body)
				cancel()
				if st == 0 {
					gaveUp.Add(1)
					continue
				}
				if st == 423 {
					continue
				}
				if st != 200 {
					t.Errorf("acquire: %d %s", st, raw)
					return
				}
				var l api.Lease
				_ = json.Unmarshal(raw, &l)
				told := l.ValidUntil.Time
				w := window{obj: obj, token: l.Token, start: l.AcquiredAt.Time}
				if r.IntN(3) == 0 { // re-enter and leave once
					st, raw := s.call("POST", "/v1/locks/"+obj+"/acquire", `{"lease_id":"`+l.LeaseID+`"}`)
					if st == 200 {
						var l2 api.Lease
						_ = json.Unmarshal(raw, &l2)
						if l2.ValidUntil.After(told) {
							told = l2.ValidUntil.Time
						}
						s.call("DELETE", "/v1/leases/"+l.LeaseID, "")
					}
				}
				work := time.Duration(50+r.IntN(300)) * time.Millisecond
				if stuck {
					work = 1200 * time.Millisecond
				}
				deadline := time.Now().Add(work)
				lost := false
				for time.Now().Before(deadline) {
					time.Sleep(40 * time.Millisecond)
					st, raw := s.call("POST", "/v1/leases/"+l.LeaseID+"/renew", "")
					if st != 200 {
						lost = true
						break
					}
					var v api.Lease
					_ = json.Unmarshal(raw, &v)
					if v.ValidUntil.After(told) {
						told = v.ValidUntil.Time
					}
					if v.State == api.StatePreempted && !stuck {
						break
					}
				}
				if lost {
					w.end, w.how = told, "lost"
				} else {
					w.end, w.how = time.Now(), "released"
					if told.Before(w.end) {
						w.end = told
					}
					if st, _ := s.call("DELETE", "/v1/leases/"+l.LeaseID, ""); st != 200 {
						w.how = "lost at release"
					}
				}
				note(w)
			}
		})
	}
	time.Sleep(12 * time.Second)
	close(stop)
	wg.Wait()
	time.Sleep(2500 * time.Millisecond) // past the lease of a grant nobody got the answer of

	overlaps := 0
	for _, obj := range objs {
		var ws []window
		for _, w := range windows {
			if w.obj == obj {
				ws = append(ws, w)
			}
		}
		slices.SortFunc(ws, func(x, y window) int { return int(x.token - y.token) })
		for k := 1; k < len(ws); k++ {
			if ws[k].start.Before(ws[k-1].end.Add(-time.Millisecond)) {
				overlaps++
				t.Errorf("%s: grant %d began %v before grant %d's window ended (%s)", obj, ws[k].token,
					ws[k-1].end.Sub(ws[k].start), ws[k-1].token, ws[k-1].how)
			}
			if ws[k].token == ws[k-1].token {
				t.Errorf("%s: token %d granted twice", obj, ws[k].token)
			}
		}
	}
	t.Logf("%d grants (%v), %d requesters gave up, %d overlaps", len(windows), counts, gaveUp.Load(), overlaps)
	if counts["lost"] == 0 || gaveUp.Load() == 0 {
		t.Errorf("the load did not exercise takes and withdrawals: %v, %d gave up", counts, gaveUp.Load())
	}
}

// TestReview18TwoForcefulOneGivesUp (review of issue 18 §3): two forceful
// requesters on two other sidecars; the stuck holder re-enters during its
// cleanup window (asking a long lease) and keeps renewing; the first
// requester's client goes away. The second's ask must survive that
// withdrawal: the holder is taken when its window ends, and the second
// requester's grant begins no earlier than every valid_until ever told to
// the holder (re-entry included).
func TestReview18TwoForcefulOneGivesUp(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	c := start(t, testConfig(t, root, "sc-c"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	h := a.acquire("two", `{"preemptible":true,"cleanup_ms":2000,"lease_ms":60000}`)
	told := h.ValidUntil.Time
	time.Sleep(100 * time.Millisecond)
	p := pollLease(t, a, h.LeaseID, 20000)
	type answer struct {
		st  int
		raw []byte
	}
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	first := make(chan answer, 1)
	go func() {
		st, raw := testenv.Call(ctx1, b.hc, "POST", "/v1/locks/two/acquire", `{"preempt":true,"forceful":true,"wait_ms":20000,"info":"gives up"}`)
		first <- answer{st, raw}
	}()
	if l := <-p; l.State != api.StatePreempted {
		t.Fatalf("holder: %+v, want preempted", l)
	}
	second := make(chan answer, 1)
	go func() {
		st, raw := c.call("POST", "/v1/locks/two/acquire", `{"preempt":true,"forceful":true,"wait_ms":20000,"lease_ms":60000,"info":"stays"}`)
		second <- answer{st, raw}
	}()
	waitFor(t, 10*time.Second, "the second ask written", func() bool {
		data, _, err := conn.Get(root + "/two/privateLock")
		var d struct {
			Asks []struct{ Reason string } `json:"asks"`
		}
		return err == nil && json.Unmarshal(data, &d) == nil && len(d.Asks) == 2
	})
	// The holder re-enters asking a long lease: never told past its window.
	if st, raw := a.call("POST", "/v1/locks/two/acquire", `{"lease_id":"`+h.LeaseID+`","lease_ms":60000}`); st == 200 {
		if v := decodeLease(t, raw); v.ValidUntil.After(told) {
			told = v.ValidUntil.Time
		}
	}
	cancel1()
	<-first
	var got answer
	for done := false; !done; {
		select {
		case got = <-second:
			done = true
		case <-time.After(50 * time.Millisecond):
			st, raw := a.call("POST", "/v1/leases/"+h.LeaseID+"/renew", "")
			if st == 200 {
				if v := decodeLease(t, raw); v.ValidUntil.After(told) {
					told = v.ValidUntil.Time
				}
			}
		}
	}
	if got.st != 200 {
		t.Fatalf("the requester that stayed: %d %s, want the lock (its ask survived the other's withdrawal)", got.st, got.raw)
	}
	l2 := decodeLease(t, got.raw)
	if l2.AcquiredAt.Before(told.Add(-time.Millisecond)) {
		t.Errorf("the second requester's grant began %v before the holder's last valid_until told", told.Sub(l2.AcquiredAt.Time))
	}
	if st, raw := a.call("POST", "/v1/leases/"+h.LeaseID+"/renew", ""); st != 410 {
		t.Errorf("the taken holder's renewal: %d %s, want 410", st, raw)
	}
	c.release(l2.LeaseID)
}

// TestReview18RequesterSidecarStops (review of issue 18 §3): the sidecar of
// a waiting forceful requester is stopped (SIGTERM: a drain). Its waiting
// acquire gives up, and its ask must be withdrawn before the engine
// closes: the holder is held again and not taken when its window ends.
func TestReview18RequesterSidecarStops(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	cfgB := testConfig(t, root, "sc-b")
	cfgB.ShutdownGrace = time.Second
	b := start(t, cfgB)
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	h := a.acquire("stop", `{"preemptible":true,"cleanup_ms":3000,"lease_ms":60000}`)
	time.Sleep(100 * time.Millisecond)
	p := pollLease(t, a, h.LeaseID, 20000)
	got := make(chan int, 1)
	go func() {
		st, _ := b.call("POST", "/v1/locks/stop/acquire", `{"preempt":true,"forceful":true,"wait_ms":20000,"info":"its sidecar stops"}`)
		got <- st
	}()
	if l := <-p; l.State != api.StatePreempted {
		t.Fatalf("holder: %+v, want preempted", l)
	}
	b.stop()
	t.Logf("requester answered %d", <-got)
	data, _, err := conn.Get(root + "/stop/privateLock")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Asks []struct{ Reason string } `json:"asks"`
	}
	_ = json.Unmarshal(data, &d)
	if len(d.Asks) != 0 {
		t.Errorf("asks left in privateLock after the requester's sidecar stopped: %+v", d.Asks)
	}
	if l := <-pollLease(t, a, h.LeaseID, 5000); l.State != api.StateHeld {
		t.Errorf("holder after its window, its requester's sidecar stopped: %+v, want held", l)
		return
	}
	a.release(h.LeaseID)
}
