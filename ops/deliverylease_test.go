package ops_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/ops"
	"github.com/batonhq/baton/ops/opstest"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/testenv"
)

// blockFirstDelivery makes the app hold its first delivery until release
// is closed (then 200) or the request is cancelled (the time is sent on
// cancelled); later deliveries answer 200. It returns the first delivery
// once it is in progress and the holder watch is armed.
func blockFirstDelivery(t *testing.T, e *env, op string) (d opstest.Delivery, release chan struct{}, cancelled <-chan time.Time) {
	t.Helper()
	release = make(chan struct{})
	cut := make(chan time.Time, 1)
	first := make(chan opstest.Delivery, 1)
	e.app.SetRespond(func(ctx context.Context, d opstest.Delivery) int {
		select {
		case first <- d:
		default:
			return http.StatusOK
		}
		select {
		case <-release:
		case <-ctx.Done():
			cut <- time.Now()
		}
		return http.StatusOK
	})
	e.submit(op)
	select {
	case d = <-first:
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery")
	}
	time.Sleep(100 * time.Millisecond) // past the holder watch's arming delay
	return d, release, cut
}

// TestDeliveryLeaseUnguessable (issue 18 §2): a delivery's Baton-Lease-Id
// was "op:<op id>:<attempt>", both readable (GET /v1/locks shows "op <id>",
// GET /v1/ops the attempt), so another process re-entered the running
// delivery's lease (200, holds 2), renewed it and counted a hold down. Now
// the id is random per attempt, only in the delivery's header: the guess
// gets nothing, no answer and no log line at info lists the real id, and
// the app's own id still re-enters.
func TestDeliveryLeaseUnguessable(t *testing.T) {
	var logs testenv.Buffer
	e := newEnv(t, envOptions{noKafka: true, hold: true, logs: &logs})
	d, release, _ := blockFirstDelivery(t, e, `{"id":"dl-1","object":"dl","info":"guess me"}`)
	id := d.Header.Get(ops.HeaderLeaseID)

	guess := "op:dl-1:1"
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/v1/locks/dl/acquire", `{"lease_id":"` + guess + `","wait_ms":0}`, 400},
		{"POST", "/v1/leases/" + guess + "/renew", "", 404},
		{"GET", "/v1/leases/" + guess, "", 404},
		{"DELETE", "/v1/leases/" + guess, "", 404},
	} {
		if st, raw := e.call(c.method, c.path, c.body); st != c.want {
			t.Errorf("guessed id: %s %s → %d %s, want %d", c.method, c.path, st, raw, c.want)
		}
	}
	for _, path := range []string{"/v1/locks/dl", "/v1/locks", "/v1/ops/dl-1", "/metrics"} {
		if _, raw := e.call("GET", path, ""); strings.Contains(string(raw), id) {
			t.Errorf("GET %s lists the delivery's lease id: %s", path, raw)
		}
	}
	// The app's own id re-enters, and its hold is counted down by its own
	// release (the delivery's hold stays: Baton's).
	var re api.Lease
	if err := json.Unmarshal(e.mustCall(200, "POST", "/v1/locks/dl/acquire", `{"lease_id":"`+id+`"}`), &re); err != nil || re.Holds != 2 || re.Token != d.TokenInt() {
		t.Errorf("re-entry with the header's id: %+v %v, want holds 2 and the delivery's token", re, err)
	}
	e.mustCall(200, "DELETE", "/v1/leases/"+id, "")
	close(release)
	e.waitState("dl-1", api.OpDone, 20*time.Second)
	if strings.Contains(logs.String(), id) {
		t.Errorf("the live delivery lease id %s is in a log line at info or above:\n%s", id, logs.String())
	}
}

// TestPreemptedDeliveryWithdrawn (issue 18 §3, op deliveries): the client of
// a preempting acquire goes away during the delivery's cleanup window
// (sidecar.app.preempt.cleanup): its ask is withdrawn and the delivery
// goes on — not cancelled when the window ends (before: cancelled and the
// op given back) — and the op is done in its one attempt. A preemption
// that cannot wait for the delivery's cleanup is a 400.
func TestPreemptedDeliveryWithdrawn(t *testing.T) {
	e := newEnv(t, envOptions{noKafka: true, config: func(c *props.Config) {
		c.RetryCount = 0
		c.AppPreemptCleanup = 1500 * time.Millisecond
	}})
	_, release, cancelled := blockFirstDelivery(t, e, `{"id":"pw-1","object":"pw"}`)
	preemption := func() string {
		var st api.LockStatus
		if err := json.Unmarshal(e.mustCall(200, "GET", "/v1/locks/pw", ""), &st); err != nil {
			t.Fatalf("inspect: %+v %v", st, err)
		}
		if st.Holder == nil { // the delivery ended
			return ""
		}
		return st.Holder.Preemption
	}
	// A preemption that cannot wait for the delivery's cleanup + 1 s is
	// refused before anything reaches the delivery.
	st, raw := e.call("POST", "/v1/locks/pw/acquire", `{"preempt":true,"wait_ms":2000}`)
	if st != 400 || !strings.Contains(string(raw), `"field":"wait_ms"`) || !strings.Contains(string(raw), "cleanup_ms (1500)") {
		t.Errorf("preempting a delivery with wait_ms 2000 (cleanup 1.5 s): %d %s, want 400 on wait_ms naming the cleanup", st, raw)
	}
	if p := preemption(); p != "" {
		t.Errorf("after the refused preemption: %q pending, want none", p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	answered := make(chan int, 1)
	go func() {
		st, _ := testenv.Call(ctx, e.hc, "POST", "/v1/locks/pw/acquire", `{"preempt":true,"wait_ms":10000,"info":"user saves"}`)
		answered <- st
	}()
	waitFor(t, 10*time.Second, "the preemption asked", func() bool { return preemption() != "" })
	cancel()
	<-answered
	waitFor(t, 10*time.Second, "the preemption withdrawn", func() bool { return preemption() == "" })
	select {
	case at := <-cancelled:
		t.Fatalf("the delivery was cancelled at %v although the preemption was withdrawn", at)
	case <-time.After(2500 * time.Millisecond): // past the 1.5 s cleanup window
	}
	close(release)
	e.waitState("pw-1", api.OpDone, 20*time.Second)
	if evs := e.waitEvents("pw-1", 1); len(evs) != 1 || evs[0].Outcome != "done" || evs[0].Attempt != 1 {
		t.Errorf("attempts = %+v, want one, done", evs)
	}
}
