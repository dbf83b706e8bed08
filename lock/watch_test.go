package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
)

// describeSnap is a snapshot's holder and queue in one line.
func describeSnap(s *lock.Snapshot) string {
	var b strings.Builder
	if s.Holder == nil {
		b.WriteString("free")
	} else {
		fmt.Fprintf(&b, "held %d by %s", s.Holder.Token, s.Holder.Info)
	}
	for _, w := range s.Waiters {
		b.WriteString(", waiting " + w.Info)
	}
	return b.String()
}

// chain follows obj on e from seen, passing back each answer's version,
// and sends every state on out until ctx ends.
func chain(ctx context.Context, t *testing.T, e *lock.Engine, obj string, seen lock.Seen, out chan<- *lock.Snapshot) {
	for ctx.Err() == nil {
		snap, changed, err := e.WaitChange(ctx, obj, seen, 10*time.Second)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			t.Errorf("WaitChange(%q, %+v): %v", obj, seen, err)
			return
		}
		if !changed {
			if snap.Version != seen.Version {
				t.Errorf("unchanged answer with version %s, asked after %s", snap.Version, seen.Version)
			}
			continue
		}
		if snap.Version == seen.Version {
			t.Errorf("changed answer with the version asked after (%s): %s", seen.Version, describeSnap(snap))
		}
		seen = lock.Seen{Version: snap.Version}
		out <- snap
	}
}

// TestWaitChangeSequence: a watcher on a third engine (its own session)
// sees, with tokens and in order, an object appear held (a), gain a waiter
// (b), hand over to b and become free, chaining versions. A second caller
// that chains from the first version only after all of it happened (its
// polls far apart) steps through exactly the same states: no state the
// engine saw is lost between two polls.
func TestWaitChangeSequence(t *testing.T) {
	root := testRoot(t, zkServer)
	a := newEngine(t, zkServer.Servers(), root)
	b := newEngine(t, zkServer.Servers(), root)
	w := newEngine(t, zkServer.Servers(), root)
	const obj = "watch/seq"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	first, changed, err := w.WaitChange(ctx, obj, lock.Seen{}, time.Second)
	if err != nil || !changed || first.Holder != nil || len(first.Waiters) != 0 || first.Object != obj {
		t.Fatalf("first WaitChange on a missing object = %+v, %v, %v; want free, changed", first, changed, err)
	}
	states := make(chan *lock.Snapshot, 100)
	var wg sync.WaitGroup
	wg.Go(func() { chain(ctx, t, w, obj, lock.Seen{Version: first.Version}, states) })
	var seen []*lock.Snapshot
	until := func(what string, cond func(*lock.Snapshot) bool) {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case s := <-states:
				seen = append(seen, s)
				if cond(s) {
					return
				}
			case <-timeout:
				t.Fatalf("watcher never saw %s; saw %d states", what, len(seen))
			}
		}
	}

	ga := acquire(t, a, obj, lock.Foreground, lock.AcquireOptions{Info: "a"})
	until("a holding", func(s *lock.Snapshot) bool { return s.Holder != nil && s.Holder.Token == ga.Token() })
	got := make(chan *lock.Grant, 1)
	go func() {
		g, err := b.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Info: "b", Wait: 30 * time.Second})
		if err != nil {
			t.Errorf("b: %v", err)
		}
		got <- g
	}()
	until("b waiting", func(s *lock.Snapshot) bool { return len(s.Waiters) == 1 && s.Waiters[0].Info == "b" })
	release(t, ga)
	gb := <-got
	if gb == nil {
		t.FailNow()
	}
	until("b holding", func(s *lock.Snapshot) bool { return s.Holder != nil && s.Holder.Token == gb.Token() })
	release(t, gb)
	until("free", func(s *lock.Snapshot) bool { return s.Holder == nil && len(s.Waiters) == 0 })

	// Holders in order, with their tokens, each since its own grant.
	var holders []int64
	for _, s := range seen {
		if tok := int64(0); s.Holder != nil {
			tok = s.Holder.Token
			if n := len(holders); n == 0 || holders[n-1] != tok {
				holders = append(holders, tok)
			}
		}
	}
	if len(holders) != 2 || holders[0] != ga.Token() || holders[1] != gb.Token() || gb.Token() <= ga.Token() {
		t.Errorf("holders seen %v, want [%d %d]", holders, ga.Token(), gb.Token())
	}
	for _, s := range seen {
		if s.Holder != nil && s.Holder.Since.IsZero() {
			t.Errorf("holder without since: %s", describeSnap(s))
		}
	}

	// A late caller chaining from the first version gets the same states.
	seenV := lock.Seen{Version: first.Version}
	for i, want := range seen {
		s, changed, err := w.WaitChange(ctx, obj, seenV, 0)
		if err != nil || !changed {
			t.Fatalf("late caller, step %d: changed %v, %v", i, changed, err)
		}
		if s.Version != want.Version || describeSnap(s) != describeSnap(want) {
			t.Fatalf("late caller, step %d: %s %q, the watcher saw %s %q", i, s.Version, describeSnap(s), want.Version, describeSnap(want))
		}
		seenV = lock.Seen{Version: s.Version}
	}
	if s, changed, err := w.WaitChange(ctx, obj, seenV, 0); err != nil || changed {
		t.Errorf("late caller at the end: %s changed %v, %v; want unchanged", describeSnap(s), changed, err)
	}
	cancel()
	wg.Wait()
	for i, s := range seen {
		t.Logf("state %d: version %s: %s", i, s.Version, describeSnap(s))
	}
}

// TestWaitChangeSharesOneWatch: 20 callers waiting on one object cost one
// watch: a change sets the watch again a few times, however many callers
// wait (the object node reaped after the last release and created for the
// next acquire are changes too: up to about 5), not once per caller. With a
// watch per caller the count would grow by at least 20 per change.
func TestWaitChangeSharesOneWatch(t *testing.T) {
	root := testRoot(t, zkServer)
	holder := newEngine(t, zkServer.Servers(), root)
	w := newEngine(t, zkServer.Servers(), root)
	const obj, n = "watch/shared", 20
	ctx := context.Background()
	cur, _, err := w.WaitChange(ctx, obj, lock.Seen{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		before := w.WatchStats()
		answers := make(chan *lock.Snapshot, n)
		for range n {
			go func() {
				s, changed, err := w.WaitChange(ctx, obj, lock.Seen{Version: cur.Version}, 30*time.Second)
				if err != nil || !changed {
					t.Errorf("WaitChange: changed %v, %v", changed, err)
				}
				answers <- s
			}()
		}
		waitFor(t, 20*time.Second, "20 callers waiting", func() bool { return w.WatchStats().Waiters == n })
		g := acquire(t, holder, obj, lock.Foreground, lock.AcquireOptions{})
		for range n {
			if s := <-answers; s == nil || s.Holder == nil || s.Holder.Token != g.Token() {
				t.Fatalf("round %d: a caller got %+v, want the holder %d", round, s, g.Token())
			}
		}
		after := w.WatchStats()
		if after.Objects != 1 {
			t.Errorf("round %d: %d objects watched, want 1", round, after.Objects)
		}
		if arms := after.Arms - before.Arms; arms > 8 {
			t.Errorf("round %d: %d watches set for one change and %d callers, want at most 8", round, arms, n)
		}
		release(t, g)
		cur, _, err = w.WaitChange(ctx, obj, lock.Seen{Version: cur.Version}, 30*time.Second) // the holder
		if err == nil {
			cur, _, err = w.WaitChange(ctx, obj, lock.Seen{Version: cur.Version}, 30*time.Second) // free
		}
		if err != nil || cur.Holder != nil {
			t.Fatalf("round %d: after the release: %+v, %v", round, cur, err)
		}
	}
}

// TestWaitChangeTimeout: a caller with the current state (by version, by
// token, or both) gets it back unchanged when the timeout passes; a caller
// whose token or version is not the current one gets the current state at
// once; a bad name or timeout is an error.
func TestWaitChangeTimeout(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root)
	other := newEngine(t, zkServer.Servers(), root)
	const obj = "watch/timeout"
	ctx := context.Background()
	g := acquire(t, other, obj, lock.Foreground, lock.AcquireOptions{})
	defer release(t, g)
	cur, changed, err := e.WaitChange(ctx, obj, lock.Seen{}, 0)
	if err != nil || !changed || cur.Holder == nil || cur.Holder.Token != g.Token() {
		t.Fatalf("current: %+v %v %v", cur, changed, err)
	}
	tok, stale, zero := g.Token(), g.Token()-1, int64(0)
	for _, c := range []struct {
		name    string
		seen    lock.Seen
		changed bool
	}{
		{"version", lock.Seen{Version: cur.Version}, false},
		{"token", lock.Seen{Token: &tok}, false},
		{"both", lock.Seen{Version: cur.Version, Token: &tok}, false},
		{"old token", lock.Seen{Token: &stale}, true},
		{"free", lock.Seen{Token: &zero}, true},
		{"unknown version", lock.Seen{Version: "12345"}, true},
		{"version, old token", lock.Seen{Version: cur.Version, Token: &stale}, true},
	} {
		s, changed, err := e.WaitChange(ctx, obj, c.seen, 100*time.Millisecond)
		if err != nil || changed != c.changed || s.Version != cur.Version || s.Holder == nil || s.Holder.Token != g.Token() {
			t.Errorf("%s: %s %q changed %v, %v; want %s changed %v", c.name, s.Version, describeSnap(s), changed, err, cur.Version, c.changed)
		}
	}
	if _, _, err := e.WaitChange(ctx, "", lock.Seen{}, 0); !errors.Is(err, lock.ErrInvalidObject) {
		t.Errorf("empty object: %v, want ErrInvalidObject", err)
	}
	if _, _, err := e.WaitChange(ctx, obj, lock.Seen{}, -time.Second); err == nil {
		t.Errorf("negative timeout: no error")
	}
}

// TestWaitChangeClosed: a caller waiting for a change when the engine is
// closed gets ErrClosed at once (not at its 10-minute timeout), and so does
// one calling afterwards.
func TestWaitChangeClosed(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root)
	const obj = "watch/closed"
	cur, _, err := e.WaitChange(context.Background(), obj, lock.Seen{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := e.WaitChange(context.Background(), obj, lock.Seen{Version: cur.Version}, 10*time.Minute)
		done <- err
	}()
	waitFor(t, 20*time.Second, "the caller waiting", func() bool { return e.WatchStats().Waiters == 1 })
	e.Close()
	select {
	case err := <-done:
		if !errors.Is(err, lock.ErrClosed) {
			t.Errorf("waiting caller after Close: %v, want ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("waiting caller still waiting 30s after Close")
	}
	if _, _, err := e.WaitChange(context.Background(), obj, lock.Seen{}, 0); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("WaitChange after Close: %v, want ErrClosed", err)
	}
}
