package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonhq/baton/lock"
)

const reopenBadName = "baton-review-reopen-unresolvable.invalid:2181"

// lostWhileUnresolvable fails e's session while its only server name does
// not resolve: replace's open fails and reopen retries with backoff.
func lostWhileUnresolvable(t *testing.T, e *lock.Engine) {
	t.Helper()
	e.SetServersForTest([]string{reopenBadName})
	e.FailSessionForTest(fmt.Errorf("%w: review: lost while a name does not resolve", lock.ErrSessionLost))
}

// Acquires blocked in connectedSession while the lost session stays
// current (its successor cannot be opened) must all be granted once the
// name resolves again and reopen installs the successor: the install's
// broadcast wakes them, well before their own 20 s deadlines.
func TestReviewReopenWaitersWakeOnInstall(t *testing.T) {
	t.Parallel()
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root)
	lostWhileUnresolvable(t, e)
	const n = 4
	errs := make(chan error, n)
	took := make(chan time.Duration, n)
	var restored time.Time
	var mu sync.Mutex
	for i := range n {
		go func() {
			g, err := e.Acquire(context.Background(), fmt.Sprintf("REOPEN-wake-%d", i), lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
			mu.Lock()
			took <- time.Since(restored)
			mu.Unlock()
			if err == nil {
				err = g.Release(context.Background())
			}
			errs <- err
		}()
	}
	time.Sleep(700 * time.Millisecond) // waiters blocked; reopen at its 400 ms..800 ms backoff
	if h := e.Health(); h.Connected {
		t.Fatalf("connected while the only server name does not resolve")
	}
	mu.Lock()
	restored = time.Now()
	mu.Unlock()
	e.SetServersForTest(zkServer.Servers())
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("acquire after the name resolved again: %v", err)
		}
		// reopen's next try is at most 1.6 s away, connecting ~ms
		if d := <-took; d > 6*time.Second {
			t.Errorf("a waiter took %v after the name resolved again (not woken by the install)", d)
		}
	}
}

// Close while the successor cannot be opened: acquires waiting for it end
// at once with ErrClosed (not at their deadlines), Close itself returns
// promptly although reopen sleeps up to 5 s between tries, and nothing is
// left in ZooKeeper (testRoot's check; goleak at the package's end).
func TestReviewReopenCloseWhileReopening(t *testing.T) {
	t.Parallel()
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root)
	g0 := acquire(t, e, "REOPEN-close-held", lock.Foreground, lock.AcquireOptions{})
	lostWhileUnresolvable(t, e)
	select {
	case <-g0.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the grant of the lost session was not told")
	}
	const n = 3
	errs := make(chan error, n)
	for i := range n {
		go func() {
			g, err := e.Acquire(context.Background(), fmt.Sprintf("REOPEN-close-%d", i), lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
			if err == nil {
				_ = g.Release(context.Background())
			}
			errs <- err
		}()
	}
	// reopen tries at 0.1, 0.3, 0.7, 1.5, 3.1 s: Close during the 3.2 s sleep
	time.Sleep(3500 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Close did not return within 1 s while reopen slept between tries")
	}
	for range n {
		select {
		case err := <-errs:
			if !errors.Is(err, lock.ErrClosed) {
				t.Errorf("a waiter for the successor ended with %v, want ErrClosed", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("a waiter for the successor did not end within 2 s of Close")
		}
	}
}

// While the successor cannot be opened because a server name does not
// resolve, the engine keeps failing to connect: Health (baton status) must
// say why, as it does for a failing dial ("the last connection error while
// it keeps failing"). The lookup error is only logged.
func TestReviewReopenHealthShowsLookupError(t *testing.T) {
	t.Parallel()
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root)
	lostWhileUnresolvable(t, e)
	time.Sleep(500 * time.Millisecond) // a few failed opens
	h := e.Health()
	if h.Connected {
		t.Fatal("connected while the only server name does not resolve")
	}
	if !strings.Contains(h.LastError, "baton-review-reopen-unresolvable") && !strings.Contains(h.LastError, "no such host") {
		t.Errorf("Health().LastError = %q while every open fails on the lookup of %s", h.LastError, reopenBadName)
	}
	e.SetServersForTest(zkServer.Servers())
	waitFor(t, 10*time.Second, "reconnected", func() bool { return e.Health().Connected })
	if h := e.Health(); h.LastError != "" {
		t.Errorf("Health().LastError = %q once connected again", h.LastError)
	}
}

// Close racing a replace in progress (the session failed from a goroutine
// Close does not wait for, as onEvent's `go s.fail` does): the successor
// must be shut or failed, never started after Close's Wait (the race
// detector reports such an Add), no goroutine may outlive Close beyond
// go-zookeeper's brief teardown, and no node is left. Not parallel: it
// counts goroutines.
func TestReviewReopenCloseRacesFail(t *testing.T) {
	root := testRoot(t, zkServer) // its raw connection is running before IgnoreCurrent
	ignore := goleak.IgnoreCurrent()
	for i := range 20 {
		e := newEngine(t, zkServer.Servers(), root)
		g := acquire(t, e, fmt.Sprintf("REOPEN-race-%d", i), lock.Foreground, lock.AcquireOptions{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.FailSessionForTest(fmt.Errorf("%w: review: lost as Close runs", lock.ErrSessionLost))
		}()
		if i%3 != 0 {
			time.Sleep(time.Duration(i%7) * 100 * time.Microsecond)
		}
		if err := e.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		<-done
		select {
		case <-g.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("the grant was not ended by Close or the loss")
		}
		if h := e.Health(); h.Connected {
			t.Fatalf("iteration %d: connected after Close", i)
		}
	}
	// goleak.Find retries for a while: go-zookeeper's teardown may end
	// after Close returns.
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("goroutines left after Close: %v", err)
	}
}
