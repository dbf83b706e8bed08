package ops_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/props"
)

// TestReview18RevokeDuringPreemptedDelivery (review of issue 18 §3, op
// deliveries): an operator's revocation of a delivery must cancel it,
// whatever preemptions come and go. The worker's OnSignal hands signals to
// deliver through a channel of one, dropping what does not fit; deliver
// stops reading it while a preemption's cleanup runs. So: ask A (the
// cleanup runs), ask B (fills the channel), the revocation (dropped), then
// both requesters give up (withdrawn): at the end of A's window deliver
// reads B, starts a window for it, finds it withdrawn at its end, and the
// delivery goes on to its end — the operator's 202 revocation never
// applied. (Before withdrawals existed a preemption always cut the
// delivery, so the dropped revocation did not matter.)
func TestReview18RevokeDuringPreemptedDelivery(t *testing.T) {
	const cleanup = 1500 * time.Millisecond
	e := newEnv(t, envOptions{noKafka: true, config: func(c *props.Config) {
		c.RetryCount = 0
		c.AppPreemptCleanup = cleanup
		c.AppTimeout = 30 * time.Second // only the revocation may cut the delivery here
	}})
	_, release, cancelled := blockFirstDelivery(t, e, `{"id":"rv-1","object":"rv"}`)
	other := otherEngine(t, e.cfg)
	ctx := context.Background()
	settle := func() { time.Sleep(300 * time.Millisecond) } // the holder's watch reads each write on its own
	_, a, err := other.Ask(ctx, "rv", lock.Signal{Kind: "preempt", Reason: "A", WaitMS: 10000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	settle()
	holder, b, err := other.Ask(ctx, "rv", lock.Signal{Kind: "preempt", Reason: "B", WaitMS: 10000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	settle()
	e.mustCall(202, "POST", "/v1/locks/rv/revoke", `{"reason":"operator: stop this delivery"}`)
	settle()
	for _, id := range []string{a.ID, b.ID} {
		if err := other.Withdraw(ctx, "rv", holder.Token, id); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case at := <-cancelled:
		t.Logf("delivery cancelled at %v", at)
	case <-time.After(3*cleanup + 2*time.Second):
		t.Errorf("the revoked delivery was not cancelled within 3 cleanup windows after the revocation (it goes on)")
	}
	close(release)
	e.waitState("rv-1", api.OpDone, 20*time.Second)
	if evs := e.waitEvents("rv-1", 1); evs[0].Outcome != "requeued" {
		t.Errorf("attempts = %+v: the revoked delivery ran to its end, want it given back", evs)
	}
}
