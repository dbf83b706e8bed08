package lock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
)

// A listing asked for after Close (an acquire that checked its session
// just before Close failed it) is refused by Engine.track: it must end at
// once with ErrClosed, not wait for the caller's deadline nor run on the
// closed connection (zk.ErrClosing), on both protocols. Asked again (the
// refused one stays the object's latest), the same.
func TestReviewTrackListingAfterClose(t *testing.T) {
	t.Parallel()
	for _, proto := range []lock.Protocol{lock.Plugin, lock.Native} {
		e := newEngine(t, zkServer.Servers(), testRoot(t, zkServer), func(o *lock.Options) { o.Protocol = proto })
		if err := e.Close(); err != nil {
			t.Fatalf("%v: Close: %v", proto, err)
		}
		for i := range 2 {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			start := time.Now()
			err := e.ListSharedLatest(ctx, "TRACK-list")
			cancel()
			if took := time.Since(start); took > time.Second {
				t.Errorf("%v call %d: a listing after Close took %v (err %v)", proto, i, took, err)
			}
			if !errors.Is(err, lock.ErrClosed) {
				t.Errorf("%v call %d: a listing after Close: %v, want ErrClosed", proto, i, err)
			}
		}
	}
}

// A plugin local handoff whose release's context ends while its multi is
// on its way completes in the background. With the engine closed meanwhile
// (Close returned while the multi had not been sent), track refuses the
// settle and it runs untracked: the release must return, the waiter end
// with ErrClosed, the settle finish harmlessly when the multi fails, and
// above all no Add may reach the WaitGroup Close waited on (a bare
// wg.Go here, not ordered after Close's Wait, is reported by the race
// detector: the release's deadline fires on a timer, not from Close).
// Not parallel: the handoff hook is the package's.
func TestReviewTrackHandoffSettleAfterClose(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root)
	const obj = "TRACK-handoff"
	g := acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
	waitErr := make(chan error, 1)
	go func() {
		g2, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
		if err == nil {
			_ = g2.Release(context.Background())
		}
		waitErr <- err
	}()
	waitFor(t, 10*time.Second, "the waiter offered a handoff", func() bool { return e.HandoffOffers(obj) == 1 })
	sent := make(chan struct{})
	unblock := make(chan struct{})
	answered := make(chan struct{})
	var once, onceAns sync.Once
	restore := lock.SetHandoffHook(func(stage string) {
		switch stage {
		case "send":
			once.Do(func() { close(sent) })
			<-unblock
		case "answer":
			onceAns.Do(func() { close(answered) })
		}
	})
	defer restore()
	defer func() {
		select {
		case <-unblock:
		default:
			close(unblock)
		}
	}()
	relErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		relErr <- g.Release(ctx)
	}()
	select {
	case <-sent:
	case <-time.After(10 * time.Second):
		t.Fatal("the release never sent a handoff multi")
	}
	closed := make(chan struct{})
	go func() { _ = e.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return with a handoff multi unsent")
	}
	select {
	case err := <-relErr:
		t.Logf("release: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the release did not return after its deadline")
	}
	if g.State() == lock.Held {
		t.Error("the releasing grant still Held after Close")
	}
	// The waiter, claimed, waits for the multi's answer (h.done), which
	// the settle gives: the multi goes to the closed connection now.
	close(unblock)
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the handoff multi was never answered after Close")
	}
	select {
	case err := <-waitErr:
		if !errors.Is(err, lock.ErrClosed) {
			t.Errorf("the waiter: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not end after Close and the multi's answer")
	}
	time.Sleep(100 * time.Millisecond) // the settle's rest (goleak at the package's end)
}

// Close amid a mixed load: exclusive and shared acquires, holder watches
// armed at once (HolderWatchDelay 1 ms: the watch, the native watcher and
// learner), releases whose context ends early (background completions,
// plugin handoffs settled in the background), object watches (WaitChange)
// and Health polled throughout, on both protocols, under the race
// detector: e.mu, now taken under a grant's mutex and e.objMu, must not
// deadlock with Close. Close must return; every acquire end soon after with an
// error, every grant ever returned end (none left Held without a watcher),
// and every ephemeral node go (testRoot's check).
func TestReviewTrackCloseUnderLoad(t *testing.T) {
	t.Parallel()
	for _, proto := range []lock.Protocol{lock.Plugin, lock.Native} {
		for round := range 4 {
			root := testRoot(t, zkServer)
			e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) {
				o.Protocol = proto
				o.HolderWatchDelay = time.Millisecond
			})
			var (
				mu     sync.Mutex
				grants []*lock.Grant
				wg     sync.WaitGroup
				closed atomic.Bool
				lastAt atomic.Int64 // when the last acquire returned (unix ns)
			)
			stop := make(chan struct{})
			for i := range 10 {
				wg.Go(func() {
					obj := fmt.Sprintf("LOAD-%d", i%3)
					rng := rand.New(rand.NewPCG(uint64(i), uint64(round)))
					for {
						select {
						case <-stop:
							return
						default:
						}
						o := lock.AcquireOptions{Wait: 5 * time.Second} // longer than the bound below
						if proto == lock.Native && i%4 == 0 {
							o.Shared = true
						}
						g, err := e.Acquire(context.Background(), obj, lock.Foreground, o)
						if closed.Load() {
							lastAt.Store(time.Now().UnixNano())
						}
						if err != nil {
							if errors.Is(err, lock.ErrClosed) || errors.Is(err, lock.ErrUnavailable) {
								return
							}
							continue
						}
						mu.Lock()
						grants = append(grants, g)
						mu.Unlock()
						time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond) // armed watches
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
						_ = g.Release(ctx)
						cancel()
					}
				})
			}
			for i := range 3 { // object watches (w.mu, then e.mu) and Health (e.mu) meanwhile
				wg.Go(func() {
					obj := fmt.Sprintf("LOAD-%d", i)
					var seen lock.Seen
					for {
						select {
						case <-stop:
							return
						default:
						}
						_ = e.Health()
						snap, _, err := e.WaitChange(context.Background(), obj, seen, 20*time.Millisecond)
						if errors.Is(err, lock.ErrClosed) {
							return
						}
						if err == nil {
							seen = lock.Seen{Version: snap.Version}
						}
					}
				})
			}
			time.Sleep(time.Duration(80+round*60) * time.Millisecond)
			done := make(chan struct{})
			closedAt := time.Now()
			go func() { closed.Store(true); _ = e.Close(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				// said at once: a deadlocked Close hangs the engine's
				// cleanup too, and a parallel test's log comes at its end
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				fmt.Fprintf(os.Stderr, "%s: %v round %d: Close did not return in 10 s\n%s\n", t.Name(), proto, round, buf)
				t.Fatalf("%v round %d: Close did not return", proto, round)
			}
			ended := make(chan struct{})
			go func() { wg.Wait(); close(ended) }()
			select {
			case <-ended:
			case <-time.After(5 * time.Second):
				close(stop)
				t.Fatalf("%v round %d: acquires still running 5 s after Close", proto, round)
			}
			close(stop)
			if l := lastAt.Load(); l != 0 {
				if d := time.Unix(0, l).Sub(closedAt); d > 2*time.Second {
					t.Errorf("%v round %d: an acquire returned %v after Close began", proto, round, d)
				}
			}
			mu.Lock()
			gs := grants
			mu.Unlock()
			for _, g := range gs {
				select {
				case <-g.Done():
				case <-time.After(2 * time.Second):
					t.Errorf("%v round %d: grant %s (token %d) not ended 2 s after Close: %v", proto, round, g.Node(), g.Token(), g.State())
				}
			}
			t.Logf("%v round %d: %d grants", proto, round, len(gs))
		}
	}
}

// replace opens the next session under e.mu; go-zookeeper's Connect
// resolves every server name first (DNSHostProvider.Init, up to 3 s) and
// fails if any one does not resolve. replace then logs and returns, the
// lost session stays current, and nothing ever opens another: every
// acquire ends ErrUnavailable for good, even once the names resolve again
// (a ZooKeeper pod's headless-service name is absent while it restarts,
// which is also when sessions are lost). The engine must come back.
func TestReviewTrackReplaceResolveFails(t *testing.T) {
	t.Parallel()
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root)
	e.SetServersForTest([]string{"baton-review-unresolvable.invalid:2181"})
	e.FailSessionForTest(fmt.Errorf("%w: review: lost while a name does not resolve", lock.ErrSessionLost))
	e.SetServersForTest(zkServer.Servers()) // the name resolves again
	g, err := e.Acquire(context.Background(), "TRACK-resolve", lock.Foreground, lock.AcquireOptions{Wait: 15 * time.Second})
	if err != nil {
		t.Fatalf("the engine never opened a new session after one failed resolution: %v (connected %v)", err, e.Health().Connected)
	}
	release(t, g)
}
