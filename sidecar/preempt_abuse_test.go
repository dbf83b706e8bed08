package sidecar_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/testenv"
)

// pollLease long-polls a lease (GET ?wait=lost) for at most timeoutMS and
// sends the answer; it returns once the poll is in progress.
func pollLease(t *testing.T, s *sc, id string, timeoutMS int) <-chan api.Lease {
	t.Helper()
	ch := make(chan api.Lease, 1)
	before := s.metric("baton_lease_polls_in_flight")
	go func() {
		st, raw := s.call("GET", "/v1/leases/"+id+"?wait=lost&timeout_ms="+strconv.Itoa(timeoutMS), "")
		var l api.Lease
		if st != 200 || json.Unmarshal(raw, &l) != nil {
			l.State = "answered " + string(raw)
		}
		ch <- l
	}()
	waitFor(t, 10*time.Second, "the poll in progress", func() bool { return s.metric("baton_lease_polls_in_flight") > before })
	return ch
}

// TestPreemptRefused (issue 18 §3): a preemption that cannot wait long
// enough to use the yield it asks for is refused with a 400 naming the
// field, before anything reaches the holder. The reproduction,
// {"preempt":true,"forceful":true,"wait_ms":0,"preempt_wait_ms":1} from
// another node against a holder with cleanup_ms 5000, got 423 at once and
// the holder was taken 300 ms later; a non-forceful wait_ms 0 told the
// holder "preempted". Now each is a 400 and the holder stays held.
func TestPreemptRefused(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	h := a.acquire("victim", `{"preemptible":true,"cleanup_ms":5000,"lease_ms":60000}`)
	time.Sleep(100 * time.Millisecond) // past the holder watch's arming delay
	for _, tc := range []struct{ name, body, field, mention string }{
		{"issue: forceful, wait 0, preempt_wait 1", `{"preempt":true,"forceful":true,"wait_ms":0,"preempt_wait_ms":1}`, "wait_ms", "try once"},
		{"forceful, preempt_wait 1", `{"preempt":true,"forceful":true,"wait_ms":10000,"preempt_wait_ms":1}`, "preempt_wait_ms", "cannot shorten"},
		{"preempt_wait under the holder's cleanup", `{"preempt":true,"forceful":true,"wait_ms":10000,"preempt_wait_ms":3000}`, "preempt_wait_ms", "cleanup_ms (5000)"},
		{"wait under the holder's cleanup", `{"preempt":true,"forceful":true,"wait_ms":5500}`, "wait_ms", "cleanup_ms (5000)"},
		{"not forceful, wait 0", `{"preempt":true,"wait_ms":0}`, "wait_ms", "try once"},
		{"not forceful, the default wait", `{"preempt":true}`, "wait_ms", "zookeeper.foreground.task.timeout"},
	} {
		st, raw := b.call("POST", "/v1/locks/victim/acquire", tc.body)
		if st != 400 {
			t.Errorf("%s: %s → %d %s, want 400", tc.name, tc.body, st, raw)
			continue
		}
		if e := decodeError(t, raw); e.Field != tc.field || !strings.Contains(e.Message, tc.mention) {
			t.Errorf("%s: %+v, want field %s and a message with %q", tc.name, e, tc.field, tc.mention)
		} else {
			t.Logf("%s: %s", tc.name, e.Message)
		}
	}
	// Nothing reached the holder: still held well past when the issue's
	// forceful take came (300 ms), never told preempted.
	if l := <-pollLease(t, a, h.LeaseID, 1500); l.State != api.StateHeld {
		t.Errorf("holder after the refused preemptions: %+v, want held", l)
	}
	var st api.LockStatus
	if err := json.Unmarshal(a.mustCall(200, "GET", "/v1/locks/victim", ""), &st); err != nil || st.Holder == nil || st.Holder.Preemption != "" {
		t.Errorf("inspect: %+v %v, want the holder with no preemption pending", st.Holder, err)
	}
	if l := decodeLease(t, a.mustCall(200, "POST", "/v1/leases/"+h.LeaseID+"/renew", "")); l.State != api.StateHeld {
		t.Errorf("renewal: %+v, want held", l)
	}
	a.release(h.LeaseID)
}

// TestPreemptWithdrawn (issue 18 §3): a preemption whose requester gives up
// is withdrawn and the holder told it may go on.
func TestPreemptWithdrawn(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	type answer struct {
		st  int
		raw []byte
	}
	// request sends a preempting acquire to sc-b that ends when cancel is
	// called (the client goes away) or it is answered.
	request := func(obj, body string) (<-chan answer, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		ch := make(chan answer, 1)
		go func() {
			st, raw := testenv.Call(ctx, b.hc, "POST", "/v1/locks/"+obj+"/acquire", body)
			ch <- answer{st, raw}
		}()
		return ch, cancel
	}
	preemption := func(obj string) string {
		var st api.LockStatus
		if err := json.Unmarshal(a.mustCall(200, "GET", "/v1/locks/"+obj, ""), &st); err != nil || st.Holder == nil {
			t.Fatalf("inspect %s: %+v %v", obj, st, err)
		}
		return st.Holder.Preemption
	}

	// The client of a forceful requester goes away during the holder's
	// cleanup window: before, the holder stayed preempted and was taken
	// when its cleanup ended (410 preempted); now it is held again at once
	// and never taken.
	t.Run("client gone", func(t *testing.T) {
		h := a.acquire("gone", `{"preemptible":true,"cleanup_ms":3000,"lease_ms":60000}`)
		time.Sleep(100 * time.Millisecond) // past the holder watch's arming delay
		p := pollLease(t, a, h.LeaseID, 20000)
		got, cancel := request("gone", `{"preempt":true,"forceful":true,"wait_ms":20000,"info":"impatient"}`)
		if l := <-p; l.State != api.StatePreempted {
			t.Fatalf("holder: %+v, want preempted", l)
		}
		p = pollLease(t, a, h.LeaseID, 20000) // started while preempted: returns at the next change
		cancel()
		if r := <-got; r.st != 0 {
			t.Logf("requester answered %d %s before the cancel", r.st, r.raw)
		}
		if l := <-p; l.State != api.StateHeld {
			t.Fatalf("holder after the requester went away: %+v, want held (the preemption withdrawn)", l)
		}
		if s := preemption("gone"); s != "" {
			t.Errorf("inspect: preemption %q still pending, want none", s)
		}
		// Past the end of the cleanup window: still held, not taken.
		if l := <-pollLease(t, a, h.LeaseID, 4000); l.State != api.StateHeld {
			t.Errorf("holder after its cleanup window: %+v, want held (not taken)", l)
		}
		if l := decodeLease(t, a.mustCall(200, "POST", "/v1/leases/"+h.LeaseID+"/renew", "")); l.State != api.StateHeld {
			t.Errorf("renewal: %+v, want held", l)
		}
		a.release(h.LeaseID)
	})

	// Two requesters: the forceful one goes away, the other still waits.
	// Only the withdrawn ask goes: the holder stays preempted (one still
	// stands), and when its cleanup ends no forceful request insists, so
	// it is held again, not taken (before: the forceful signal stayed and
	// the holder was taken).
	t.Run("one of two", func(t *testing.T) {
		h := a.acquire("two", `{"preemptible":true,"cleanup_ms":2500,"lease_ms":60000}`)
		time.Sleep(100 * time.Millisecond)
		p := pollLease(t, a, h.LeaseID, 20000)
		_, cancelForceful := request("two", `{"preempt":true,"forceful":true,"wait_ms":20000,"info":"forceful"}`)
		defer cancelForceful()
		if l := <-p; l.State != api.StatePreempted {
			t.Fatalf("holder: %+v, want preempted", l)
		}
		p = pollLease(t, a, h.LeaseID, 20000) // returns at the next change
		polite, cancelPolite := request("two", `{"preempt":true,"wait_ms":20000,"info":"polite"}`)
		defer cancelPolite()
		waitFor(t, 10*time.Second, "the polite ask written", func() bool { return strings.Contains(preemption("two"), "polite") })
		cancelForceful()
		waitFor(t, 10*time.Second, "the forceful ask withdrawn", func() bool {
			data, _, err := conn.Get(root + "/two/privateLock")
			var d struct {
				Asks []struct{ Reason string } `json:"asks"`
			}
			return err == nil && json.Unmarshal(data, &d) == nil && len(d.Asks) == 1 && d.Asks[0].Reason == "polite"
		})
		if l := <-p; l.State != api.StateHeld {
			t.Fatalf("holder at the end of its cleanup: %+v, want held (no forceful ask stands)", l)
		}
		cancelPolite()
		<-polite
		if l := decodeLease(t, a.mustCall(200, "POST", "/v1/leases/"+h.LeaseID+"/renew", "")); l.State != api.StateHeld {
			t.Errorf("renewal: %+v, want held", l)
		}
		a.release(h.LeaseID)
	})
}
