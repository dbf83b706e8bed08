package lock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
)

// TestReview18AskKeepsRevoke (review of issue 18 §3): a standing ask
// (Engine.Ask) written while an operator's revocation (Engine.Signal, kind
// "revoke") has not been read yet by the holder's watch must not erase it.
// Ask overwrites privateLock's single Signal with itself, so a holder whose
// watch reads privateLock after both writes (a slow or briefly
// disconnected holder — here its watch is held in OnSignal on an earlier
// signal) never learns of the revocation: the sidecar that was asked
// answered 202 "revocation requested", yet the holder keeps its lease.
func TestReview18AskKeepsRevoke(t *testing.T) {
	root := testRoot(t, zkServer)
	e1 := newEngine(t, zkServer.Servers(), root)
	e2 := newEngine(t, zkServer.Servers(), root)
	var mu sync.Mutex
	var kinds []string
	gate := make(chan struct{})
	first := make(chan struct{})
	var once sync.Once
	g := acquire(t, e1, "RV", lock.Foreground, lock.AcquireOptions{Preemptible: true, Cleanup: time.Second,
		OnSignal: func(s lock.Signal) {
			mu.Lock()
			kinds = append(kinds, s.Kind)
			mu.Unlock()
			once.Do(func() { close(first); <-gate }) // the watch is busy with the first signal
		}})
	t.Cleanup(func() { _ = g.Release(context.Background()) })
	time.Sleep(50 * time.Millisecond) // the holder watch is armed
	ctx := context.Background()
	if _, err := e2.Signal(ctx, "RV", 0, lock.Signal{Kind: "note"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first:
	case <-time.After(5 * time.Second):
		t.Fatal("the first signal did not reach the holder")
	}
	if _, err := e2.Signal(ctx, "RV", 0, lock.Signal{Kind: "revoke", Reason: "operator"}); err != nil {
		t.Fatal(err)
	}
	_, ask, err := e2.Ask(ctx, "RV", lock.Signal{Kind: "preempt", Reason: "a preempting acquire"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	close(gate)
	// The ask is the last write: once it is delivered, everything the
	// holder will ever be told is delivered.
	waitFor(t, 5*time.Second, "the ask delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(kinds) > 0 && kinds[len(kinds)-1] == "preempt"
	})
	mu.Lock()
	got := append([]string(nil), kinds...)
	mu.Unlock()
	revoked := false
	for _, k := range got {
		revoked = revoked || k == "revoke"
	}
	if !revoked {
		t.Errorf("signals delivered to the holder: %v; the revocation written before ask %s was erased by it (privateLock's Signal overwritten)", got, ask.ID)
	}
}
