package sidecar_test

// Review (vreview) of commit 687702a: a grant after waiting for a no-wait
// release in flight of the same object on the same sidecar counts that
// wait in its lease's waited_ms (lock.AcquireOptions.Since). A client
// places a grant's validity at its send time + waited_ms + valid_for_ms,
// so waited_ms must never exceed the time from the client's send to its
// receipt of the answer (too large: the client believes the lock valid
// past the sidecar's valid_until). The bounds below compare milliseconds
// truncated on both sides, as waited_ms is.

import (
	"context"
	"path"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
)

// timedAnswer is an answer with the caller's send and receipt times.
type timedAnswer struct {
	status     int
	body       []byte
	sent, recv time.Time
}

// wall is the time from the send to the receipt, in whole milliseconds.
func (a timedAnswer) wall() int64 { return a.recv.Sub(a.sent).Milliseconds() }

// timedAcquire sends POST /v1/locks/{obj}/acquire in the background.
func timedAcquire(s *sc, obj, body string) <-chan timedAnswer {
	return timedPost(s, "/v1/locks/"+obj+"/acquire", body)
}

// timedPost sends POST route in the background.
func timedPost(s *sc, route, body string) <-chan timedAnswer {
	ch := make(chan timedAnswer, 1)
	go func() {
		sent := time.Now()
		st, b := s.call("POST", route, body)
		ch <- timedAnswer{st, b, sent, time.Now()}
	}()
	return ch
}

// TestReviewVWaitedWithinWallClock: an acquire of an object whose no-wait
// release is in flight on the same sidecar (recorded as freeing when the
// acquire is sent) is granted with a waited_ms that is at least the time
// it was surely held (from when it was seen in flight to the heal), and
// never more than the wall time from its send to the receipt of its
// answer. Cases: the release's write held back by the proxy until a heal
// ("held"); the write merely slow (100 ms each way, "slow"); and, native
// only, a shared acquire after an exclusive no-wait release ("shared").
// A set of objects and a semaphore's permit never wait for a release in
// flight in the sidecar (take asks the engine at once: they queue behind
// it in ZooKeeper), yet their waited_ms obeys the same bounds: a set
// including the object ("set"), and a permit after a permit's no-wait
// release ("permit"). On both protocols.
func TestReviewVWaitedWithinWallClock(t *testing.T) {
	for _, proto := range []string{"plugin", "native"} {
		cases := []string{"held", "slow", "set", "permit"}
		if proto == "native" {
			cases = append(cases, "shared")
		}
		for _, mode := range cases {
			t.Run(proto+"/"+mode, func(t *testing.T) {
				root := testRoot(t)
				conn := rawConn(t)
				cfg, p := proxiedConfig(t, root, "vw-a")
				cfg.LockProtocol = proto
				a := start(t, cfg)
				t.Cleanup(p.Heal)
				objPath := path.Join(root, "vw")

				first, firstBody := "/v1/locks/vw/acquire", `{"lease_ms":60000}`
				route, body := first, `{"wait_ms":30000}`
				switch mode {
				case "shared":
					body = `{"wait_ms":30000,"mode":"shared"}`
				case "set":
					route, body = "/v1/locks/acquire", `{"wait_ms":30000,"objects":["vw","vw2"]}`
				case "permit":
					first, firstBody = "/v1/semaphores/vw/acquire", `{"lease_ms":60000,"permits":1}`
					route, body = first, `{"wait_ms":30000,"permits":1}`
				}
				l := decodeLease(t, a.mustCall(200, "POST", first, firstBody))
				if mode == "permit" {
					objPath = "" // the permit's object: not checked
				}
				if mode == "slow" {
					p.SetLatency(100 * time.Millisecond)
				} else {
					p.HoldUpstream()
				}
				nowaitRelease(t, a, l)
				if mode != "permit" { // (a permit's release is recorded too today, though nothing waits on it)
					freeingIs(t, a, 1, "the release in flight")
				}
				ch := timedPost(a, route, body)
				var surely time.Duration
				if mode != "slow" {
					waitFor(t, 5*time.Second, "the acquire in flight", func() bool { return a.metric("baton_acquires_in_flight") == 1 })
					seen := time.Now()
					time.Sleep(300 * time.Millisecond)
					if objPath != "" && !slices.Contains(kidsOf(t, conn, objPath), l.Node) {
						t.Fatalf("the released holder's node %s is gone while its write was held", l.Node)
					}
					surely = time.Since(seen)
					p.Heal()
				}
				var g timedAnswer
				select {
				case g = <-ch:
				case <-time.After(30 * time.Second):
					t.Fatal("the acquire not answered within 30 s")
				}
				if g.status != 200 {
					t.Fatalf("the acquire after the release: %d %s", g.status, g.body)
				}
				gl := decodeLease(t, g.body)
				if gl.Token <= l.Token {
					t.Errorf("granted token %d, not above the released %d", gl.Token, l.Token)
				}
				if gl.WaitedMS < surely.Milliseconds() {
					t.Errorf("waited_ms %d, but the acquire was held at least %d ms", gl.WaitedMS, surely.Milliseconds())
				}
				if gl.WaitedMS > g.wall() {
					t.Errorf("waited_ms %d, more than the %d ms from the send to the answer: a client would place the validity late", gl.WaitedMS, g.wall())
				}
				// (The object node may have been deleted and made again:
				// then the grant's node has the released one's name.)
				if objPath != "" && gl.Node != l.Node && slices.Contains(kidsOf(t, conn, objPath), l.Node) {
					t.Errorf("granted (node %s) while the released holder's node %s is still there", gl.Node, l.Node)
				}
				p.Heal()
				a.release(gl.LeaseID)
			})
		}
	}
}

// TestReviewVClientValidity: the Go client's validity end of a lease
// granted after a wait for a no-wait release in flight (Lease.ValidUntil:
// its send time + waited_ms + valid_for_ms) is never later than the
// sidecar's valid_until for that lease, as the acquire's answer and a GET
// /v1/leases/{id} right after report it; nor is that of a re-entry of the
// lease (waited_ms 0: counted from its send). The wait for the release is
// counted (waited_ms >= the time it was surely held). On both protocols.
func TestReviewVClientValidity(t *testing.T) {
	for _, proto := range []string{"plugin", "native"} {
		t.Run(proto, func(t *testing.T) {
			root := testRoot(t)
			cfg, p := proxiedConfig(t, root, "vc-a")
			cfg.LockProtocol = proto
			a := start(t, cfg)
			t.Cleanup(p.Heal)
			ctx := context.Background()
			c := client.New(cfg.SocketPath)

			first, err := c.Acquire(ctx, "vc", client.WithLease(60*time.Second), client.WithoutRenewal())
			if err != nil {
				t.Fatalf("first acquire: %v", err)
			}
			p.HoldUpstream()
			if err := first.ReleaseNoWait(ctx); err != nil {
				t.Fatalf("ReleaseNoWait: %v", err)
			}
			freeingIs(t, a, 1, "the release in flight")
			type got struct {
				l   *client.Lease
				err error
			}
			ch := make(chan got, 1)
			go func() {
				l, err := c.Acquire(ctx, "vc", client.WithWait(30*time.Second), client.WithLease(10*time.Second), client.WithoutRenewal())
				ch <- got{l, err}
			}()
			waitFor(t, 5*time.Second, "the acquire in flight", func() bool { return a.metric("baton_acquires_in_flight") == 1 })
			seen := time.Now()
			time.Sleep(300 * time.Millisecond)
			surely := time.Since(seen)
			p.Heal()
			r := <-ch
			if r.err != nil {
				t.Fatalf("acquire after the release: %v", r.err)
			}
			l := r.l
			if w := l.Last().WaitedMS; w < surely.Milliseconds() {
				t.Errorf("waited_ms %d, but the acquire was held at least %d ms", w, surely.Milliseconds())
			}
			checkClientValidity(t, a, l, "the grant after the release in flight")

			re, err := c.Acquire(ctx, "vc", client.WithReentry(l.ID()), client.WithoutRenewal())
			if err != nil {
				t.Fatalf("re-entry: %v", err)
			}
			if w := re.Last().WaitedMS; w != 0 {
				t.Errorf("re-entry's waited_ms %d, want 0", w)
			}
			checkClientValidity(t, a, re, "its re-entry")
			if err := re.Release(ctx); err != nil {
				t.Fatalf("release of the re-entry's hold: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("release: %v", err)
			}
		})
	}
}

// checkClientValidity fails if the client's validity end of l is later
// than the sidecar's valid_until in l's acquire answer or in a GET of the
// lease now (both in whole milliseconds, as the API writes them).
func checkClientValidity(t *testing.T, a *sc, l *client.Lease, what string) {
	t.Helper()
	mine := l.ValidUntil().Truncate(time.Millisecond)
	if mine.IsZero() {
		t.Fatalf("%s: the client has no validity end", what)
	}
	told := l.Last().ValidUntil.Time
	now := decodeLease(t, a.mustCall(200, "GET", "/v1/leases/"+l.ID(), ""))
	for _, s := range []struct {
		name string
		vu   time.Time
	}{{"the acquire's answer", told}, {"GET /v1/leases/{id}", now.ValidUntil.Time}} {
		if mine.After(s.vu) {
			t.Errorf("%s: the client's validity ends %v, after the sidecar's valid_until %v in %s (waited_ms %d, valid_for_ms %d)",
				what, mine.Format(api.TimeFormat), s.vu.Format(api.TimeFormat), s.name, l.Last().WaitedMS, l.Last().ValidForMS)
		}
	}
}

// TestReviewVWaitBound: an acquire with wait_ms 2000 that first waits for
// the no-wait release in flight (its write held back 700 ms) and then
// queues behind another sidecar's waiter, granted at the release, answers
// 423 InstanceLockException no earlier than its wait after its send (a
// timer never fires early) and no later than 2 s after that; its waited_ms
// counts its whole wait (>= 2000) and never more than the time from its
// send to the answer. On both protocols.
func TestReviewVWaitBound(t *testing.T) {
	for _, proto := range []string{"plugin", "native"} {
		t.Run(proto, func(t *testing.T) {
			root := testRoot(t)
			conn := rawConn(t)
			acfg, p := proxiedConfig(t, root, "vb-a")
			bcfg := testConfig(t, root, "vb-b")
			acfg.LockProtocol, bcfg.LockProtocol = proto, proto
			a, b := start(t, acfg), start(t, bcfg)
			t.Cleanup(p.Heal)
			objPath := path.Join(root, "vb")

			l := a.acquire("vb", `{"lease_ms":60000}`)
			before := len(kidsOf(t, conn, objPath))
			w := acquireAsync(b, "vb", `{"wait_ms":15000,"lease_ms":60000}`)
			waitFor(t, 5*time.Second, "vb-b queued", func() bool { return len(kidsOf(t, conn, objPath)) > before })
			p.HoldUpstream()
			nowaitRelease(t, a, l)
			freeingIs(t, a, 1, "the release in flight")
			const waitMS = 2000
			x := timedAcquire(a, "vb", `{"wait_ms":2000}`)
			waitFor(t, 5*time.Second, "the acquire in flight", func() bool { return a.metric("baton_acquires_in_flight") == 1 })
			time.Sleep(700 * time.Millisecond)
			p.Heal()
			g := <-w
			if g.status != 200 {
				t.Fatalf("vb-b after the release: %d %s", g.status, g.body)
			}
			wl := decodeLease(t, g.body)
			var gx timedAnswer
			select {
			case gx = <-x:
			case <-time.After(10 * time.Second):
				t.Fatal("a's acquire not answered within 10 s of the heal")
			}
			if gx.status != 423 {
				t.Fatalf("a's acquire while vb-b holds: %d %s, want 423", gx.status, gx.body)
			}
			if el := gx.recv.Sub(gx.sent); el < waitMS*time.Millisecond || el > waitMS*time.Millisecond+2*time.Second {
				t.Errorf("a's acquire answered %v after its send, want within [%d ms, %d ms + 2 s]", el, waitMS, waitMS)
			}
			e := decodeError(t, gx.body)
			if e.Kind != api.InstanceLockException || e.WaitedMS == nil {
				t.Fatalf("423 = %+v, want InstanceLockException with waited_ms", e)
			}
			if *e.WaitedMS < waitMS || *e.WaitedMS > gx.wall() {
				t.Errorf("423's waited_ms %d, want within [%d, %d] (its wait; the send to the answer)", *e.WaitedMS, waitMS, gx.wall())
			}
			if e.Holder == nil || e.Holder.Sidecar != "vb-b" {
				t.Errorf("423 holder = %+v, want vb-b's lease", e.Holder)
			}
			b.release(wl.LeaseID)
		})
	}
}
