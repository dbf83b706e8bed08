package ops_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/ops/opstest"
	"github.com/batonhq/baton/props"
)

// hangFirstDelivery submits op and makes the app hang on its first delivery
// until that request is cancelled (the time is sent on cancelled); later
// deliveries answer 200. It returns once the first delivery is in progress
// and the holder watch is armed.
func hangFirstDelivery(t *testing.T, e *env, op string) (id string, cancelled <-chan time.Time) {
	t.Helper()
	var n atomic.Int32
	cut := make(chan time.Time, 1)
	started := make(chan struct{})
	e.app.SetRespond(func(ctx context.Context, _ opstest.Delivery) int {
		if n.Add(1) == 1 {
			close(started)
			<-ctx.Done()
			cut <- time.Now()
		}
		return http.StatusOK
	})
	id = e.submit(op)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery")
	}
	time.Sleep(100 * time.Millisecond) // past the holder watch's arming delay
	return id, cut
}

// TestPreemptedDelivery: a foreground acquire with "preempt" while an op is
// delivered on its object: the delivery's request is cancelled after
// sidecar.app.preempt.cleanup, the op is given back without counting the
// attempt (elastic.request.retry.count 0 here: a counted failure would
// dead-letter it), the requester is granted, and the op is delivered again
// once the object is free and ends done.
func TestPreemptedDelivery(t *testing.T) {
	e := newEnv(t, envOptions{noKafka: true, config: func(c *props.Config) {
		c.RetryCount = 0
		c.AppPreemptCleanup = 200 * time.Millisecond
	}})
	id, cancelled := hangFirstDelivery(t, e, `{"id":"pre-1","object":"pre"}`)
	t0 := time.Now()
	st, raw := e.call("POST", "/v1/locks/pre/acquire", `{"preempt":true,"wait_ms":10000,"info":"user saves"}`)
	granted := time.Now()
	if st != 200 {
		t.Fatalf("preempting acquire: %d %s", st, raw)
	}
	var l api.Lease
	if err := json.Unmarshal(raw, &l); err != nil {
		t.Fatal(err)
	}
	var cut time.Time
	select {
	case cut = <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the delivery's request was not cancelled")
	}
	t.Logf("delivery cancelled %v after the preempting acquire (cleanup 200ms); requester granted %v after",
		cut.Sub(t0).Round(time.Millisecond), granted.Sub(t0).Round(time.Millisecond))
	// After the cleanup window, and long before the requester's 10 s wait
	// would end (how soon after the window moves with the load: logged).
	if d := cut.Sub(t0); d < 200*time.Millisecond || d > 5*time.Second {
		t.Errorf("cancelled %v after the request, want after the 200ms cleanup and well before the 10 s wait", d)
	}
	e.mustCall(200, "DELETE", "/v1/leases/"+l.LeaseID, "")
	op := e.waitState(id, api.OpDone, 20*time.Second)
	evs := e.waitEvents(id, 2)
	if len(evs) != 2 || evs[0].Outcome != "requeued" || evs[1].Outcome != "done" || evs[1].Attempt != 1 {
		t.Errorf("attempts = %+v, want the preempted one given back (requeued, not counted), then done as attempt 1", evs)
	}
	if op.LastError != "" {
		t.Errorf("op = %+v, want done with no counted failure", op)
	}
}

// TestRevokedDelivery: an operator's revocation (POST .../revoke) of an
// object whose op is being delivered cancels the delivery's request at
// once; the op is given back without counting the attempt and delivered
// again (done, not dead-lettered with retry.count 0).
func TestRevokedDelivery(t *testing.T) {
	e := newEnv(t, envOptions{noKafka: true, config: func(c *props.Config) { c.RetryCount = 0 }})
	id, cancelled := hangFirstDelivery(t, e, `{"id":"rev-1","object":"rev"}`)
	t0 := time.Now()
	e.mustCall(202, "POST", "/v1/locks/rev/revoke", `{"reason":"stuck handler"}`)
	select {
	case cut := <-cancelled:
		t.Logf("delivery cancelled %v after the revocation", cut.Sub(t0).Round(time.Millisecond))
		if cut.Sub(t0) > time.Second {
			t.Errorf("cancelled %v after the revocation, want at once", cut.Sub(t0))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the delivery's request was not cancelled")
	}
	e.waitState(id, api.OpDone, 20*time.Second)
	if evs := e.waitEvents(id, 2); len(evs) != 2 || evs[0].Outcome != "requeued" || evs[1].Attempt != 1 {
		t.Errorf("attempts = %+v, want the revoked one given back, then done as attempt 1", evs)
	}
}
