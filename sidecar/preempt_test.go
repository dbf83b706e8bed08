package sidecar_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/api"
)

// TestPreempt: two sidecars, a holder on sc-a, a foreground requester with
// "preempt" on sc-b (the signal goes through ZooKeeper).
func TestPreempt(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	// poll long-polls a lease on sc-a and returns the answer and when.
	poll := func(id string) <-chan api.Lease {
		ch := make(chan api.Lease, 1)
		go func() {
			st, raw := a.call("GET", "/v1/leases/"+id+"?wait=lost&timeout_ms=20000", "")
			var l api.Lease
			if st != 200 || json.Unmarshal(raw, &l) != nil {
				t.Errorf("long-poll: %d %s", st, raw)
			}
			ch <- l
		}()
		waitFor(t, 10*time.Second, "the poll in progress", func() bool { return a.metric("baton_lease_polls_in_flight") == 1 })
		return ch
	}
	type answer struct {
		st  int
		raw []byte
		at  time.Time
	}
	request := func(obj, body string) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			st, raw := b.call("POST", "/v1/locks/"+obj+"/acquire", body)
			ch <- answer{st, raw, time.Now()}
		}()
		return ch
	}
	hold := func(obj, body string) api.Lease {
		l := a.acquire(obj, body)
		time.Sleep(100 * time.Millisecond) // past the holder watch's arming delay
		return l
	}

	t.Run("released-in-time", func(t *testing.T) {
		h := hold("released-in-time", `{"preemptible":true,"cleanup_ms":3000,"lease_ms":60000}`)
		if !h.Preemptible || h.CleanupMS != 3000 || h.ValidForMS > 3000 {
			t.Errorf("preemptible lease = %+v, want cleanup 3000 and valid_for_ms ≤ 3000", h)
		}
		p := poll(h.LeaseID)
		t0 := time.Now()
		got := request("released-in-time", `{"preempt":true,"wait_ms":10000,"info":"user saves"}`)
		pl := <-p
		told := time.Since(t0)
		t.Logf("holder told %v after the preempting request", told.Round(time.Millisecond))
		if pl.State != api.StatePreempted || !strings.Contains(pl.Reason, "user saves") {
			t.Errorf("long-poll = %+v, want state preempted naming the requester", pl)
		}
		// Told through the watch on the object (tens of ms on an idle
		// machine, a few hundred at a load of 20), so that the holder keeps
		// its cleanup window: told within half of it. A latency figure is
		// not asserted (issue 24); it is logged above.
		if told > 1500*time.Millisecond {
			t.Errorf("told %v after the request, want within half the holder's 3 s cleanup window", told)
		}
		var st api.LockStatus
		if err := json.Unmarshal(a.mustCall(200, "GET", "/v1/locks/released-in-time", ""), &st); err != nil || st.Holder == nil ||
			!st.Holder.Preemptible || !strings.Contains(st.Holder.Preemption, "user saves") {
			t.Errorf("inspect while preempted: %+v %v, want preemptible and the pending preemption", st.Holder, err)
		}
		a.release(h.LeaseID)
		r := <-got
		if r.st != 200 {
			t.Fatalf("requester: %d %s", r.st, r.raw)
		}
		b.release(decodeLease(t, r.raw).LeaseID)
	})

	t.Run("forceful", func(t *testing.T) {
		h := hold("forceful", `{"preemptible":true,"cleanup_ms":1500,"lease_ms":60000}`)
		last := decodeLease(t, a.mustCall(200, "POST", "/v1/leases/"+h.LeaseID+"/renew", ""))
		p := poll(h.LeaseID)
		t0 := time.Now()
		got := request("forceful", `{"preempt":true,"forceful":true,"wait_ms":10000}`)
		pl := <-p
		tp := time.Now() // the preemption took effect before the holder was told
		if pl.State != api.StatePreempted {
			t.Fatalf("long-poll = %+v, want preempted", pl)
		}
		// Renewals go on but tell nothing past the preemption + cleanup.
		rn := decodeLease(t, a.mustCall(200, "POST", "/v1/leases/"+h.LeaseID+"/renew", ""))
		if rn.State != api.StatePreempted || rn.ValidUntil.After(tp.Add(1500*time.Millisecond)) {
			t.Errorf("renewal while preempted = %+v, want preempted, valid until ≤ preemption + 1.5s", rn)
		}
		told := rn.ValidUntil.Time
		if last.ValidUntil.After(told) {
			told = last.ValidUntil.Time
		}
		pl = <-poll(h.LeaseID)
		lostAt := time.Now()
		if pl.State != api.StateLost || pl.Reason != api.ReasonPreempted {
			t.Errorf("second long-poll = %+v, want lost, preempted", pl)
		}
		if e := decodeError(t, a.mustCall(410, "POST", "/v1/leases/"+h.LeaseID+"/renew", "")); e.Reason != api.ReasonPreempted {
			t.Errorf("renewal after: %+v", e)
		}
		r := <-got
		if r.st != 200 {
			t.Fatalf("forceful requester: %d %s", r.st, r.raw)
		}
		g := decodeLease(t, r.raw)
		t.Logf("holder told lost %v after the request; requester granted %v after, %v after the validity last told to the holder",
			lostAt.Sub(t0).Round(time.Millisecond), r.at.Sub(t0).Round(time.Millisecond), g.AcquiredAt.Sub(told).Round(time.Millisecond))
		if g.AcquiredAt.Before(told) {
			t.Errorf("granted at %v, before the holder's told validity %v", g.AcquiredAt, told)
		}
		if !lostAt.Before(r.at) {
			t.Errorf("the holder was told lost at %v, not before the grant (%v)", lostAt, r.at)
		}
		b.release(g.LeaseID)
	})

	t.Run("not-forceful", func(t *testing.T) {
		h := hold("not-forceful", `{"preemptible":true,"cleanup_ms":500,"lease_ms":60000}`)
		t0 := time.Now()
		r := <-request("not-forceful", `{"preempt":true,"preempt_wait_ms":1500,"wait_ms":10000}`)
		if r.st != 423 {
			t.Fatalf("non-forceful requester: %d %s, want 423", r.st, r.raw)
		}
		e := decodeError(t, r.raw)
		t.Logf("423 after %v: %s (reason %q)", r.at.Sub(t0).Round(time.Millisecond), e.Message, e.Reason)
		if !strings.Contains(e.Reason, "did not yield") || e.Holder == nil || e.Holder.Token != h.Token {
			t.Errorf("423 = %+v, want a reason and the holder", e)
		}
		waitFor(t, 5*time.Second, "the preemption lifted", func() bool {
			return decodeLease(t, a.mustCall(200, "POST", "/v1/leases/"+h.LeaseID+"/renew", "")).State == api.StateHeld
		})
		a.release(h.LeaseID)
	})

	t.Run("not-preemptible", func(t *testing.T) {
		h := hold("not-preemptible", `{"lease_ms":60000}`)
		r := <-request("not-preemptible", `{"preempt":true,"forceful":true,"wait_ms":1500}`)
		if r.st != 423 {
			t.Fatalf("requester: %d %s, want 423 after its wait", r.st, r.raw)
		}
		if l := decodeLease(t, a.mustCall(200, "POST", "/v1/leases/"+h.LeaseID+"/renew", "")); l.State != api.StateHeld {
			t.Errorf("a lease that is not preemptible = %+v, want held", l)
		}
		a.release(h.LeaseID)
	})

	t.Run("plugin-holder", func(t *testing.T) {
		// A privateLock as the original plugin writes it: never preempted.
		if _, err := conn.Create(root+"/plug", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Create(root+"/plug/privateLock", []byte("plugin-holder"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Delete(root+"/plug/privateLock", -1); _ = conn.Delete(root+"/plug", -1) }()
		r := <-request("plug", `{"preempt":true,"forceful":true,"wait_ms":1200}`)
		if r.st != 423 {
			t.Fatalf("requester: %d %s, want 423 after its wait", r.st, r.raw)
		}
		if e := decodeError(t, r.raw); e.Reason != "" {
			t.Errorf("423 = %+v: no preemption was asked of a plugin holder, want no preemption reason", e)
		}
		data, stat, err := conn.Get(root + "/plug/privateLock")
		if err != nil || string(data) != "plugin-holder" || stat.Version != 0 {
			t.Errorf("the plugin's privateLock changed: %q version %d %v", data, stat.Version, err)
		}
	})

	t.Run("bad-input", func(t *testing.T) {
		for body, field := range map[string]string{
			`{"cleanup_ms":100}`:                                  "cleanup_ms",
			`{"preemptible":true,"cleanup_ms":0}`:                 "cleanup_ms",
			`{"forceful":true}`:                                   "forceful",
			`{"preempt_wait_ms":5}`:                               "preempt_wait_ms",
			`{"preempt":true,"type":"background"}`:                "preempt",
			`{"preempt":true,"preempt_wait_ms":-1}`:               "preempt_wait_ms",
			`{"preempt":true,"wait_ms":0}`:                        "wait_ms",
			`{"preempt":true,"wait_ms":999}`:                      "wait_ms",
			`{"preempt":true,"wait_ms":5000,"preempt_wait_ms":0}`: "preempt_wait_ms",
		} {
			if e := decodeError(t, b.mustCall(400, "POST", "/v1/locks/x/acquire", body)); e.Field != field {
				t.Errorf("%s: %+v, want field %s", body, e, field)
			}
		}
	})
}
