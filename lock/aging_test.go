package lock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
)

type fgGrant struct {
	seq, token, ctime int64 // ctime: the node's creation time (ZooKeeper's clock, ms)
}

// ctimeOf reads a granted request's node's creation time.
func ctimeOf(t testing.TB, conn *zk.Conn, root string, g *lock.Grant) int64 {
	name, _ := lock.EscapeObject(g.Object())
	_, st, err := conn.Exists(root + "/" + name + "/" + g.Node())
	if err != nil || st == nil {
		t.Errorf("stat of %s: %v", g.Node(), err)
		return 0
	}
	return st.Ctime
}

func nodeSeq(t testing.TB, node string) int64 {
	t.Helper()
	i := strings.LastIndexByte(node, '-')
	v, err := strconv.ParseInt(node[i+1:], 10, 64)
	if err != nil {
		t.Fatalf("node %q: %v", node, err)
	}
	return v
}

// agingRun runs a foreground stream that keeps at least one foreground
// request waiting at every handoff (three callers on two engines, each
// acquiring again right after its release) and one background request on
// an engine with the given aging bound. It returns the background grant
// (or its error), the foreground grants, and whether Inspect showed the
// background waiter aged.
//
//lint:ignore ST1008 the background grant's error sits beside the grant it is about
func agingRun(t *testing.T, maxWait, bgWait time.Duration) (bg *lock.Grant, bgCtime int64, bgErr error, fg []fgGrant, sawAged bool, chk *overlapChecker) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	e1 := newEngine(t, zkServer.Servers(), root)
	e2 := newEngine(t, zkServer.Servers(), root)
	eb := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.BackgroundMaxWait = maxWait })
	chk = &overlapChecker{}
	var mu sync.Mutex
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i, e := range []*lock.Engine{e1, e1, e2} {
		wg.Go(func() {
			for !stop.Load() {
				g, err := e.Acquire(context.Background(), "AG", lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
				if err != nil {
					t.Errorf("foreground %d: %v", i, err)
					return
				}
				chk.enter(g.Token())
				ct := ctimeOf(t, conn, root, g)
				mu.Lock()
				fg = append(fg, fgGrant{seq: nodeSeq(t, g.Node()), token: g.Token(), ctime: ct})
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				chk.leave()
				if err := g.Release(context.Background()); err != nil {
					t.Errorf("release: %v", err)
					return
				}
			}
		})
	}
	waitFor(t, 10*time.Second, "stream running", func() bool { mu.Lock(); defer mu.Unlock(); return len(fg) >= 10 })
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		bg, bgErr = eb.Acquire(context.Background(), "AG", lock.Background, lock.AcquireOptions{Wait: bgWait})
		if bgErr == nil {
			chk.enter(bg.Token())
			bgCtime = ctimeOf(t, conn, root, bg)
			time.Sleep(20 * time.Millisecond)
			chk.leave()
			if err := bg.Release(context.Background()); err != nil {
				t.Errorf("background release: %v", err)
			}
		}
	})
	for wait := true; wait; {
		select {
		case <-done:
			wait = false
		case <-time.After(20 * time.Millisecond):
			st, err := e2.Inspect(context.Background(), "AG")
			if err != nil {
				continue
			}
			for _, w := range st.Waiters {
				if w.Type == "background" && w.Aged {
					sawAged = true
				}
			}
		}
	}
	// Let foreground requests that arrived after the background one finish.
	mu.Lock()
	n := len(fg)
	mu.Unlock()
	waitFor(t, 10*time.Second, "more foreground grants", func() bool { mu.Lock(); defer mu.Unlock(); return len(fg) >= n+6 })
	stop.Store(true)
	wg.Wait()
	return bg, bgCtime, bgErr, fg, sawAged, chk
}

// Aging: under a foreground stream that never leaves the queue without a
// foreground waiter, a background request with aging is granted before
// foreground requests that arrived after it aged (created, on ZooKeeper's
// clock, more than the bound after it; granted after it), never after one
// that arrived after it aged; Inspect shows it aged while it waits.
func TestAgingServesBackground(t *testing.T) {
	const bound = 300 * time.Millisecond
	bg, bct, err, fg, sawAged, chk := agingRun(t, bound, 20*time.Second)
	if err != nil {
		t.Fatalf("background request with aging: %v", err)
	}
	agedAt := bct + bound.Milliseconds()
	before, after := 0, 0 // foreground requests that arrived after it aged, granted before / after it
	for _, f := range fg {
		if f.ctime > agedAt {
			if f.token < bg.Token() {
				before++
			} else {
				after++
			}
		}
	}
	t.Logf("background waited %v (bound %v); %d foreground grants in all; of those that arrived after it aged, %d granted before it, %d after",
		bg.Waited(), bound, len(fg), before, after)
	if after == 0 || before != 0 || !sawAged {
		t.Fatalf("foreground requests arriving after it aged: %d granted before it (want 0), %d after (want > 0); Inspect showed it aged: %v", before, after, sawAged)
	}
	if chk.overlaps != 0 || chk.badToken != 0 {
		t.Fatalf("overlaps %d, bad tokens %d", chk.overlaps, chk.badToken)
	}
}

// Without aging the same stream starves the background request: its wait
// runs out.
func TestAgingOffStarves(t *testing.T) {
	_, _, err, _, sawAged, chk := agingRun(t, 0, 3*time.Second)
	var ile *lock.InstanceLockError
	if !errors.As(err, &ile) || sawAged {
		t.Fatalf("background request without aging: %v (aged shown: %v); want InstanceLockError", err, sawAged)
	}
	if chk.overlaps != 0 || chk.badToken != 0 {
		t.Fatalf("overlaps %d, bad tokens %d", chk.overlaps, chk.badToken)
	}
}

// An open foreground stream at about 80 % of what the object serves: the
// service time S of one holder (20 ms of work plus the handoff) is
// measured first, then a request arrives every S/0.8. Logged for the
// README (the background request's wait with and without aging); it fails
// only if the background request with aging is not granted.
func TestAgingOpenStream(t *testing.T) {
	for _, maxWait := range []time.Duration{0, 300 * time.Millisecond} {
		root := testRoot(t, zkServer)
		e1 := newEngine(t, zkServer.Servers(), root)
		eb := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.BackgroundMaxWait = maxWait })
		hold := func() bool {
			g, err := e1.Acquire(context.Background(), "AO", lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
			if err != nil {
				t.Errorf("foreground: %v", err)
				return false
			}
			time.Sleep(20 * time.Millisecond)
			_ = g.Release(context.Background())
			return true
		}
		start := time.Now()
		for range 20 {
			hold()
		}
		service := time.Since(start) / 20
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Go(func() {
			tick := time.NewTicker(service * 5 / 4)
			defer tick.Stop()
			for !stop.Load() {
				<-tick.C
				wg.Go(func() { hold() })
			}
		})
		time.Sleep(time.Second)
		g, err := eb.Acquire(context.Background(), "AO", lock.Background, lock.AcquireOptions{Wait: 10 * time.Second})
		if err == nil {
			_ = g.Release(context.Background())
		}
		stop.Store(true)
		wg.Wait()
		if err != nil {
			if maxWait > 0 {
				t.Fatalf("background with aging %v: %v", maxWait, err)
			}
			t.Logf("open stream at ~80%% (service %v, a request every %v), no aging: background not granted within 10 s", service, service*5/4)
			continue
		}
		t.Logf("open stream at ~80%% (service %v, a request every %v), aging bound %v: background waited %v", service, service*5/4, maxWait, g.Waited())
	}
}
