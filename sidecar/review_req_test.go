package sidecar_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/sidecar"
	"github.com/batonhq/baton/testenv"
)

// Review of f3fdd99 at the sidecar: a preempting acquire names the request
// it queues with in its ask (lock.Signal.Req), and a holder's forceful
// preemption proceeds for a requester that waits in a session other than
// the one its ask was stamped with.

// TestReviewReqSidecarAskNamesItsRequest: the ask a preempting acquire
// writes names a request id, and the acquire's node under the object
// carries that id. Fails on a mutant of sidecar/acquire.go without
// opts.RequestID = req (or without Req in the ask).
func TestReviewReqSidecarAskNamesItsRequest(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	h := a.acquire("rqwire", `{"preemptible":true,"cleanup_ms":1000,"lease_ms":60000}`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type answer struct {
		st  int
		raw []byte
	}
	got := make(chan answer, 1)
	go func() {
		st, raw := testenv.Call(ctx, b.hc, "POST", "/v1/locks/rqwire/acquire", `{"preempt":true,"wait_ms":20000,"lease_ms":60000}`)
		got <- answer{st, raw}
	}()
	var req string
	waitFor(t, 10*time.Second, "the ask written", func() bool {
		data, _, err := conn.Get(root + "/rqwire/privateLock")
		var d struct {
			Asks []lock.Signal `json:"asks"`
		}
		if err != nil || json.Unmarshal(data, &d) != nil || len(d.Asks) != 1 {
			return false
		}
		req = d.Asks[0].Req
		return true
	})
	if req == "" {
		t.Fatalf("the preempting acquire's ask names no request")
	}
	found := false
	waitFor(t, 10*time.Second, "the preempting acquire queued", func() bool {
		kids, _, err := conn.Children(root + "/rqwire")
		if err != nil {
			return false
		}
		n := 0
		for _, k := range kids {
			if k == "privateLock" {
				continue
			}
			n++
			data, _, err := conn.Get(root + "/rqwire/" + k)
			var d struct {
				Req string `json:"req"`
			}
			if err == nil && json.Unmarshal(data, &d) == nil && d.Req == req {
				found = true
			}
		}
		return n >= 2
	})
	if !found {
		t.Errorf("no node under the object carries the ask's request id %q", req)
	}
	a.release(h.LeaseID)
	if r := <-got; r.st == 200 {
		b.release(decodeLease(t, r.raw).LeaseID)
	} else {
		t.Errorf("the preempting acquire: %d %s", r.st, r.raw)
	}
}

// TestReviewReqSidecarForcefulForRequeued: a forceful ask stamped with a
// session that has no node under the object (the requester's session was
// lost between its ask and its queueing: lock's
// TestReviewReqSessionLostBetweenAskAndQueue makes the loss real), its
// requester waiting in another session with the request id named in the
// ask. At the end of the holder's cleanup window the sidecar must take the
// lease (the requester waits), not withdraw the ask as a dead requester's.
// Fails with f3fdd99's lock/grant.go reverted: the lease is held again and
// the requester never granted.
func TestReviewReqSidecarForcefulForRequeued(t *testing.T) {
	a, h, p, e := preemptibleHolderAndEngine(t, "rqlost", "sc-requeued")
	req := lock.NewRequestID()
	const lostSession = 0x7fff0000feedf00d // the requester's session at its ask, lost since
	if _, _, err := e.Ask(context.Background(), "rqlost", lock.Signal{Kind: sidecar.SignalPreemptForceful,
		Reason: "a requester whose session was lost after its ask", Who: "uid=0 pid=1", WaitMS: 20000,
		Session: lostSession, Req: req}, nil); err != nil {
		t.Fatal(err)
	}
	type result struct {
		g   *lock.Grant
		err error
	}
	got := make(chan result, 1)
	go func() {
		g, err := e.Acquire(context.Background(), "rqlost", lock.Foreground, lock.AcquireOptions{RequestID: req, Wait: 20 * time.Second})
		got <- result{g, err}
	}()
	if l := <-p; l.State != api.StatePreempted {
		t.Fatalf("holder: %+v, want preempted", l)
	}
	// Past the end of the cleanup window (2 s) and the re-check (1 s).
	l := <-pollLease(t, a, h.LeaseID, 6000)
	if l.State == api.StateHeld {
		t.Errorf("holder after its cleanup window: %+v, want taken (its forceful requester waits in line in another session)", l)
		a.release(h.LeaseID)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("the requester: %v", r.err)
	}
	_ = r.g.Release(context.Background())
}
