package sidecar_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/sidecar"
	"github.com/batonhq/baton/testenv"
)

// TestReview18DeadRequesterTakes (review of issue 18 §3): a forceful
// preemption whose requester is gone without withdrawing its ask (its
// sidecar crashed, was SIGKILLed or lost its session after the ask was
// written — here a bare engine writes exactly what askToYield writes and
// closes without Withdraw) still takes the holder when its cleanup window
// ends, although nobody waits for the lock any more. The ask is tied to
// nothing of the requester's (no ephemeral node, no session), so a dead
// requester's ask stands for the whole life of the grant.
func TestReview18DeadRequesterTakes(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	h := a.acquire("dead", `{"preemptible":true,"cleanup_ms":2000,"lease_ms":60000}`)
	time.Sleep(100 * time.Millisecond) // past the holder watch's arming delay
	p := pollLease(t, a, h.LeaseID, 20000)

	e, err := lock.New(lock.Options{Servers: zkServer.Servers(), Root: root, SessionTimeout: 4 * time.Second,
		TickTime: testenv.DefaultTickTime, Logger: testLogger(t), NodeID: "sc-dead"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "requester engine connected", func() bool { return e.Health().Connected })
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
