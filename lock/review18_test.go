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

// TestReview18ReleaseUnderAskChurn (review of issue 18 §3): Ask and
// Withdraw write privateLock (each a new data version) whenever a
// requester preempts or gives up, i.e. at times a remote requester
// chooses. The holder's Release deletes privateLock at the version it last
// saw, reads again once on a conflict, then deleteOwnPL reads again and
// treats a second conflict (ErrBadVersion) as "gone": Release reports
// success while privateLock — ephemeral, owned by the holder's live
// session — stays, and the object is blocked for every later acquirer
// until that session ends. Here a second engine asks and withdraws in a
// loop (what preempting requests that give up do) while the holder
// releases; each round checks that, once Release returns nil, the next
// acquirer gets the lock.
func TestReview18ReleaseUnderAskChurn(t *testing.T) {
	root := testRoot(t, zkServer)
	e1 := newEngine(t, zkServer.Servers(), root)
	e2 := newEngine(t, zkServer.Servers(), root)
	e3 := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())
	name, _ := lock.EscapeObject("CH")
	for round := 0; round < 40; round++ {
		g := acquire(t, e1, "CH", lock.Foreground, lock.AcquireOptions{Preemptible: true, Cleanup: time.Second})
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := 0; w < 3; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, a, err := e2.Ask(context.Background(), "CH", lock.Signal{Kind: "preempt"}, nil)
					if err != nil {
						return // the holder is gone
					}
					_ = e2.Withdraw(context.Background(), "CH", g.Token(), a.ID)
				}
			}()
		}
		time.Sleep(20 * time.Millisecond)
		err := g.Release(context.Background())
		close(stop)
		wg.Wait()
		if err != nil {
			t.Logf("round %d: Release = %v", round, err)
			continue
		}
		data, st, gerr := conn.Get(root + "/" + name + "/privateLock")
		if gerr == nil && st.Czxid == g.Token() {
			t.Errorf("round %d: Release returned nil but privateLock of token %d is still there (owner session %x, data %s)",
				round, g.Token(), st.EphemeralOwner, data)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		g3, err := e3.Acquire(ctx, "CH", lock.Foreground, lock.AcquireOptions{Wait: 3 * time.Second})
		cancel()
		if err != nil {
			t.Fatalf("round %d: the next acquirer, 3 s after a successful release: %v", round, err)
		}
		release(t, g3)
	}
}
