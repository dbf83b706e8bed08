package lock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
)

// Review of 784bdb7 from the holder's side: an ask made in the gap after the
// asker's session was lost and before its successor opened, followed by
// the asker queueing for the object (as the sidecar's preempting acquire
// does: Ask, then Acquire), is among the holder grant's LiveAsks. Stamped
// with the lost session, LiveAsks finds no node of it under the object and
// drops the ask: a forceful preemption would be withdrawn by the holder's
// sidecar as if its requester were gone, while it waits in line. Not
// parallel: the hook is the package's.
func TestReviewAskAtLossLiveForHolder(t *testing.T) {
	const obj = "RASK-loss-2"
	lock.SetBeforeReplaceHook(t, func() { time.Sleep(300 * time.Millisecond) })
	root, _, e, g := shutHeldStalled(t, "RASK-loss")
	h := newEngine(t, zkServer.Servers(), root)
	hg := acquire(t, h, obj, lock.Foreground, lock.AcquireOptions{})
	select {
	case <-g.Done():
	case <-time.After(9 * time.Second):
		t.Fatal("the asker's grant was never told lost")
	}
	old := e.Health().SessionID
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, sig, err := e.Ask(ctx, obj, lock.Signal{Kind: "preempt"}, nil)
	if err != nil {
		t.Fatalf("an ask at the loss failed: %v", err)
	}
	type result struct {
		g   *lock.Grant
		err error
	}
	got := make(chan result, 1)
	go func() {
		g2, err := e.Acquire(ctx, obj, lock.Foreground, lock.AcquireOptions{Wait: 15 * time.Second})
		got <- result{g2, err}
	}()
	live := func() (bool, string) {
		lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
		defer lcancel()
		for _, a := range hg.LiveAsks(lctx) {
			if a.ID == sig.ID {
				return true, ""
			}
		}
		return false, fmt.Sprintf("asks %+v; the ask's session 0x%x, the asker's lost 0x%x, now 0x%x",
			hg.Asks(), sig.Session, old, e.Health().SessionID)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok, why := live()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the holder's LiveAsks never had the ask of a requester waiting in line: %s", why)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	release(t, hg)
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("the requester's acquire failed: %v", r.err)
		}
		release(t, r.g)
	case <-time.After(20 * time.Second):
		t.Fatal("the requester was never granted the released object")
	}
}

// An ask waiting in the gap for the next session (connectedSession) ends
// with the engine's Close, with ErrClosed, not at the end of its own ctx
// (30 s). Close itself waits for the replacement under way (fail runs it
// inside its once, which Close's own fail joins; the hook stands for a
// slow open, such as a server name that takes seconds to resolve), so the
// ask is held to end by the time Close returns, not at once.
func TestReviewAskAtLossEndsOnClose(t *testing.T) {
	lock.SetBeforeReplaceHook(t, func() { time.Sleep(time.Second) })
	root, _, e, g := shutHeldStalled(t, "RASK-close")
	h := newEngine(t, zkServer.Servers(), root)
	hg := acquire(t, h, "RASK-close-2", lock.Foreground, lock.AcquireOptions{})
	defer release(t, hg)
	select {
	case <-g.Done():
	case <-time.After(9 * time.Second):
		t.Fatal("the asker's grant was never told lost")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := e.Ask(ctx, "RASK-close-2", lock.Signal{Kind: "preempt"}, nil)
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // the ask is waiting for the successor
	closed := make(chan struct{})
	go func() { _ = e.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatal("Close did not return")
	}
	select {
	case err := <-done:
		if !errors.Is(err, lock.ErrClosed) {
			t.Errorf("an ask cut by Close returned %v, want ErrClosed", err)
		}
	case <-time.After(time.Second):
		t.Fatal("an ask waiting for the next session outlived the engine's Close")
	}
}
