package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
)

// TestLiveAsksByRequest: an ask stamped with a session its requester does
// not queue in (that session was lost between the ask and the queueing: the
// sidecar's preempting acquire asks, then acquires) is live while a node of
// its request (Signal.Req, the acquire's RequestID) waits under the object;
// an ask whose session and request have no node is not.
func TestLiveAsksByRequest(t *testing.T) {
	t.Parallel()
	const obj = "LIVEASK"
	root := testRoot(t, zkServer)
	h := newEngine(t, zkServer.Servers(), root)
	r := newEngine(t, zkServer.Servers(), root)
	hg := acquire(t, h, obj, lock.Foreground, lock.AcquireOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const gone = 0x7fff0000deadbeef // no such session
	req := lock.NewRequestID()
	_, waiting, err := r.Ask(ctx, obj, lock.Signal{Kind: "preempt", Session: gone, Req: req}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, dead, err := r.Ask(ctx, obj, lock.Signal{Kind: "preempt", Session: gone, Req: lock.NewRequestID()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		g, err := r.Acquire(ctx, obj, lock.Foreground, lock.AcquireOptions{RequestID: req, Wait: 20 * time.Second})
		if err == nil {
			err = g.Release(ctx)
		}
		got <- err
	}()
	var live []lock.Signal
	deadline := time.Now().Add(10 * time.Second)
	for {
		live = hg.LiveAsks(ctx)
		if len(live) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(live) != 1 || live[0].ID != waiting.ID {
		t.Errorf("live asks %+v; want only the ask of the request waiting in line (%s), not the one of no request (%s)", live, waiting.ID, dead.ID)
	}
	release(t, hg)
	if err := <-got; err != nil {
		t.Fatalf("the requester: %v", err)
	}
}
