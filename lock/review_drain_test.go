package lock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
)

// orderLog records every grant of one object: its child (mode, sequence,
// creation zxid) and token, for the grant-order checks of orderViolations.
type orderLog struct {
	mu     sync.Mutex
	grants []orderGrant
}

type orderGrant struct {
	node          string
	fg, shared    bool
	seq           int64
	czxid, token  int64
	engine, index int
}

// note records g (its child must exist: the caller holds it, unless g's
// engine is closing: its children vanish with its session). closing, if
// not nil, says so, asked once the child is found missing: a Close begun
// while the Exists was under way is seen (taken before it, a flag missed
// it once under load).
func (l *orderLog) note(t *testing.T, conn *zk.Conn, objPath string, g *lock.Grant, engine, index int, closing func() bool) {
	node := g.Node()
	ok, st, err := conn.Exists(path.Join(objPath, node))
	if err != nil || !ok {
		if closing == nil || !closing() {
			t.Errorf("grant %s: its child: %v %v", node, ok, err)
		}
		return
	}
	i := strings.LastIndexByte(node, '_')
	seq, err := strconv.ParseInt(node[i+1:], 10, 64)
	if err != nil {
		t.Errorf("grant %s: %v", node, err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.grants = append(l.grants, orderGrant{node: node, fg: g.Type() == lock.Foreground, shared: g.Shared(), seq: seq, czxid: st.Czxid, token: g.Token(), engine: engine, index: index})
}

// orderViolations returns the pairs of grants out of grant order: W
// granted after X (a later token) although W's child was there, ahead of
// X's, when X was granted —
//   - both foreground, W's sequence below X's, one of them exclusive (a
//     foreground child sorts behind every foreground child older than it;
//     only shared ones may pass shared ones);
//   - W foreground, X background, one of them exclusive, and W's child
//     created before the grant ahead of X's (X could only list after that
//     holder left, and would have seen W ahead of it).
func (l *orderLog) orderViolations() []string {
	l.mu.Lock()
	gs := append([]orderGrant(nil), l.grants...)
	l.mu.Unlock()
	sort.Slice(gs, func(i, j int) bool { return gs[i].token < gs[j].token })
	var bad []string
	for xi, x := range gs {
		var prev int64 // the token of the grant before x's
		for _, g := range gs[:xi] {
			if g.token < x.token {
				prev = g.token
			}
		}
		for _, w := range gs[xi+1:] {
			if w.token <= x.token || !w.fg {
				continue
			}
			switch {
			case x.fg && w.seq < x.seq && (!x.shared || !w.shared):
				bad = append(bad, fmt.Sprintf("%s (token %d) granted before %s (token %d), older and foreground", x.node, x.token, w.node, w.token))
			case !x.fg && w.czxid < prev && (!x.shared || !w.shared):
				bad = append(bad, fmt.Sprintf("background %s (token %d) granted before foreground %s (token %d, created at %d, before the grant ahead at %d)", x.node, x.token, w.node, w.token, w.czxid, prev))
			}
		}
	}
	return bad
}

// TestReviewDrainOrder: three engines queue foreground and background,
// exclusive and shared waiters on one object behind a gate, more than 64
// per engine (so the holders top up their names from their engine's
// listing, taken before the later ones arrived); while it drains, more
// foreground waiters arrive on every engine, some waiters give up (their
// context cancelled), and the third engine closes (its waiters' children
// vanish with its session, unseen by the others' listings). Never two
// holders, exclusive tokens increasing, and no waiter passed over in
// grant order (orderViolations); every waiter is granted or gave up.
func TestReviewDrainOrder(t *testing.T) {
	root := testRoot(t, zkServer)
	const obj = "order"
	name, _ := lock.EscapeObject(obj)
	objPath := path.Join(root, name)
	conn := rawConn(t, zkServer.Servers())
	es := []*lock.Engine{
		newEngine(t, zkServer.Servers(), root, native),
		newEngine(t, zkServer.Servers(), root, native),
		newEngine(t, zkServer.Servers(), root, native),
	}
	var chk rwChecker
	var log orderLog
	gate := acquire(t, es[0], obj, lock.Foreground, lock.AcquireOptions{})
	chk.enter(false, gate.Token())
	log.note(t, conn, objPath, gate, 0, -1, nil)

	r := rand.New(rand.NewPCG(7, 11))
	var (
		closing         atomic.Bool // the third engine is closing
		wg              sync.WaitGroup
		mu              sync.Mutex
		granted, failed int
		done            = make(chan struct{}, 1000)
		cancels         = map[int]context.CancelFunc{}
		gaveUp          = map[int]bool{}
	)
	start := func(i, engine int, typ lock.Type, shared bool) {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		wg.Go(func() {
			defer cancel()
			defer func() { done <- struct{}{} }()
			g, err := es[engine].Acquire(ctx, obj, typ, lock.AcquireOptions{Wait: 2 * time.Minute, Shared: shared, RequestID: "w" + strconv.Itoa(i)})
			if err != nil {
				mu.Lock()
				failed++
				if engine != 2 && !gaveUp[i] { // only those given up, and the closed engine's, fail
					t.Errorf("waiter %d (engine %d): %v", i, engine, err)
				}
				mu.Unlock()
				return
			}
			chk.enter(shared, g.Token())
			// (the third engine's grant may end with the engine: closed
			// between its grant and its release, its child is gone when
			// looked at, and it is lost, not released)
			log.note(t, conn, objPath, g, engine, i, func() bool { return engine == 2 && closing.Load() })
			chk.leave(shared)
			if err := g.Release(context.Background()); err != nil && !(engine == 2 && closing.Load()) {
				t.Errorf("release %s: %v", g.Node(), err)
			}
			mu.Lock()
			granted++
			mu.Unlock()
		})
	}
	pick := func(i, engine int, fgOnly bool) {
		typ := lock.Foreground
		if !fgOnly && r.IntN(6) == 0 {
			typ = lock.Background
		}
		start(i, engine, typ, r.IntN(5) == 0)
	}
	// First wave: 3 engines × 90, queued in three rounds, so that each
	// engine's listings see only part of the queue.
	const perEngine, late = 90, 60
	i := 0
	for round := range 3 {
		for e := range es {
			for range perEngine / 3 {
				pick(i, e, false)
				i++
			}
		}
		n := (round + 1) * perEngine * len(es) / 3
		waitFor(t, 2*time.Minute, "the round queued", func() bool { return len(children(t, conn, root, obj)) >= n+2 })
	}
	waitFor(t, time.Minute, "every waiter waiting", func() bool {
		n := 0
		for _, e := range es {
			n += e.Health().Waiting
		}
		return n >= perEngine*len(es)
	})
	// give up: every 7th waiter of engines 0 and 1, half before the
	// drain, half once it is under way
	var giveUp []int
	for j := 0; j < i; j += 7 {
		if (j/(perEngine/3))%len(es) != 2 {
			giveUp = append(giveUp, j)
		}
	}
	mu.Lock()
	for _, j := range giveUp {
		gaveUp[j] = true
	}
	mu.Unlock()
	for _, j := range giveUp[:len(giveUp)/2] {
		cancels[j]()
	}
	chk.leave(false)
	release(t, gate)
	// As it drains: late foreground arrivals on engines 0 and 1, the
	// other cancellations, the third engine's end.
	for n := 0; n < i; n++ {
		<-done
		switch {
		case n%4 == 1 && i < perEngine*len(es)+late:
			pick(i, i%2, true)
			i++
		case n == 30:
			for _, j := range giveUp[len(giveUp)/2:] {
				cancels[j]()
			}
		case n == 60:
			closing.Store(true)
			es[2].Close()
		}
	}
	wg.Wait()
	for _, b := range log.orderViolations() {
		t.Error(b)
	}
	if chk.violations != 0 || chk.badToken != 0 {
		t.Errorf("holders together %d, exclusive tokens not increasing %d", chk.violations, chk.badToken)
	}
	if granted+failed != i {
		t.Errorf("%d waiters: %d granted, %d gave up", i, granted, failed)
	}
	t.Logf("%d waiters: %d granted, %d gave up; listings %d/%d/%d, local handoffs %d/%d", i, granted, failed,
		es[0].Listings(), es[1].Listings(), es[2].Listings(), es[0].LocalHandoffs(), es[1].LocalHandoffs())
}

// TestReviewDrainLateForeground: an engine's listing shows a holder's
// successor W and a background waiter B behind it; after that listing a
// foreground waiter F arrives on another engine (this engine's listings
// never show it). W, handed the lock in process with B's name (or topping
// its names up from that listing), must not name B on its release: F
// sorts ahead of B, and F is granted first. Exclusive and shared
// variants, counted by tokens.
func TestReviewDrainLateForeground(t *testing.T) {
	for _, tc := range []struct {
		name             string
		bShared, fShared bool
	}{
		{name: "exclusive"},
		{name: "shared_b", bShared: true},
		{name: "shared_f", fShared: true},
		// (both shared: B may take beside F, and before it: shared
		// waiters may pass shared ones)
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := testRoot(t, zkServer)
			const obj = "late"
			e := newEngine(t, zkServer.Servers(), root, native)
			e2 := newEngine(t, zkServer.Servers(), root, native)
			var chk rwChecker
			gate := acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
			chk.enter(false, gate.Token())
			type got struct {
				who   string
				token int64
			}
			grants := make(chan got, 3)
			proceed := make(chan struct{})
			var wg sync.WaitGroup
			wait := func(e *lock.Engine, who string, typ lock.Type, shared bool, hold chan struct{}) {
				wg.Go(func() {
					g, err := e.Acquire(context.Background(), obj, typ, lock.AcquireOptions{Wait: time.Minute, Shared: shared})
					if err != nil {
						t.Errorf("%s: %v", who, err)
						grants <- got{who: who}
						return
					}
					chk.enter(shared, g.Token())
					grants <- got{who, g.Token()}
					if hold != nil {
						<-hold
					}
					chk.leave(shared)
					release(t, g)
				})
			}
			wait(e, "W", lock.Foreground, false, proceed)
			waitFor(t, time.Minute, "W waiting", func() bool { return e.Health().Waiting == 1 })
			wait(e, "B", lock.Background, tc.bShared, nil)
			waitFor(t, time.Minute, "B waiting", func() bool { return e.Health().Waiting == 2 })
			chk.leave(false)
			release(t, gate)
			if g := <-grants; g.who != "W" {
				t.Fatalf("%s granted first, want W", g.who)
			}
			// F arrives while W holds: on the other engine, after every
			// listing of the first.
			wait(e2, "F", lock.Foreground, tc.fShared, nil)
			conn := rawConn(t, zkServer.Servers())
			waitFor(t, time.Minute, "F queued", func() bool { return len(children(t, conn, root, obj)) == 4 }) // W, B, F and the sentinel
			close(proceed)
			a, b := <-grants, <-grants
			wg.Wait()
			if a.who != "F" || b.who != "B" || a.token >= b.token {
				t.Errorf("after W: %s (token %d), then %s (token %d); want F, then B", a.who, a.token, b.who, b.token)
			}
			if chk.violations != 0 || chk.badToken != 0 {
				t.Errorf("holders together %d, exclusive tokens not increasing %d", chk.violations, chk.badToken)
			}
		})
	}
}

// TestReviewDrainAuditTwin: a native child of the engine's session named
// with (and carrying) the request id of a live waiter, not that waiter's
// own child (a create that landed twice), is left by the audit while the
// request lives (it reads no such child now), and deleted by the audit
// once the request has ended: never left behind for good, blocking the
// object. Another engine's child named with the same live id is never
// deleted by this engine's audit.
func TestReviewDrainAuditTwin(t *testing.T) {
	root := testRoot(t, zkServer)
	const obj = "twin"
	obs := &orphanObserver{}
	e := newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) { o.AuditInterval = 100 * time.Millisecond; o.Observer = obs })
	e2 := newEngine(t, zkServer.Servers(), root, native, noAudit)
	conn := rawConn(t, zkServer.Servers())
	ctx := context.Background()
	gate := acquire(t, e2, obj, lock.Foreground, lock.AcquireOptions{})
	granted := make(chan *lock.Grant, 1)
	go func() {
		g, err := e.Acquire(ctx, obj, lock.Foreground, lock.AcquireOptions{Wait: time.Minute, RequestID: "w"})
		if err != nil {
			t.Error(err)
		}
		granted <- g
	}()
	waitFor(t, time.Minute, "W queued", func() bool { return len(children(t, conn, root, obj)) == 3 })
	var reqID string
	for _, c := range children(t, conn, root, obj) {
		if strings.Contains(c, "_w~") {
			reqID = c[strings.Index(c, "_w~")+1 : strings.LastIndexByte(c, '_')]
		}
	}
	if reqID == "" {
		t.Fatalf("no child of W in %v", children(t, conn, root, obj))
	}
	twin, err := lock.PlantNativeTwin(ctx, e, obj, reqID)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := lock.PlantNativeTwin(ctx, e2, obj, reqID) // another session's, same name
	if err != nil {
		t.Fatal(err)
	}
	release(t, gate)
	g := <-granted
	if g == nil {
		t.FailNow()
	}
	if !strings.Contains(g.Node(), reqID) || g.Node() == twin || g.Node() == foreign {
		t.Fatalf("granted %s; W's own child carries %s, not %s or %s", g.Node(), reqID, twin, foreign)
	}
	release(t, g)
	waitFor(t, time.Minute, "the audit deleted the twin", func() bool { return slices.Contains(obs.list(), name(t, obj)+"/"+twin) })
	if got := obs.list(); len(got) != 1 {
		t.Errorf("the audit deleted %v; want only the twin %s", got, twin)
	}
	if left := children(t, conn, root, obj); !slices.Contains(left, foreign) {
		t.Errorf("children %v: another session's node %s went", left, foreign)
	}
	// free the object: e2's own twin goes with its session
	e2.Close()
	h := acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
	release(t, h)
}

func name(t *testing.T, obj string) string {
	n, err := lock.EscapeObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReviewDrainSeqOrder: two engines' foreground exclusive waiters on
// one object, queued in alternating runs of 30 (each engine's listings see
// runs of the other's it does not wait behind), 200 in all, then 40 more
// arriving on both while it drains: every one is granted, in the order of
// its child's sequence number (the names a holder tops up from its
// engine's listing skip nobody and pass nobody over).
func TestReviewDrainSeqOrder(t *testing.T) {
	root := testRoot(t, zkServer)
	const obj = "seq"
	name, _ := lock.EscapeObject(obj)
	objPath := path.Join(root, name)
	conn := rawConn(t, zkServer.Servers())
	es := []*lock.Engine{newEngine(t, zkServer.Servers(), root, native), newEngine(t, zkServer.Servers(), root, native)}
	var chk overlapChecker
	var log orderLog
	gate := acquire(t, es[0], obj, lock.Foreground, lock.AcquireOptions{})
	chk.enter(gate.Token())
	var wg sync.WaitGroup
	done := make(chan struct{}, 300)
	var failed atomic.Int64
	start := func(i, engine int) {
		wg.Go(func() {
			defer func() { done <- struct{}{} }()
			g, err := es[engine].Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: 2 * time.Minute})
			if err != nil {
				failed.Add(1)
				t.Errorf("waiter %d (engine %d): %v", i, engine, err)
				return
			}
			chk.enter(g.Token())
			log.note(t, conn, objPath, g, engine, i, nil)
			chk.leave()
			release(t, g)
		})
	}
	const queued, late = 200, 40
	i := 0
	for i < queued {
		for range 30 {
			if i < queued {
				start(i, (i/30)%2)
				i++
			}
		}
		n := i
		waitFor(t, 2*time.Minute, "the run queued", func() bool { return len(children(t, conn, root, obj)) >= n+2 })
	}
	waitFor(t, time.Minute, "every waiter waiting", func() bool { return es[0].Health().Waiting+es[1].Health().Waiting >= queued })
	chk.leave()
	release(t, gate)
	for n := 0; n < i; n++ {
		<-done
		if n%3 == 0 && i < queued+late {
			start(i, i%2)
			i++
		}
	}
	wg.Wait()
	if chk.overlaps != 0 || chk.badToken != 0 || chk.grants != i+1 {
		t.Errorf("overlaps %d, tokens not increasing %d, grants %d of %d", chk.overlaps, chk.badToken, chk.grants, i+1)
	}
	log.mu.Lock()
	gs := append([]orderGrant(nil), log.grants...)
	log.mu.Unlock()
	sort.Slice(gs, func(a, b int) bool { return gs[a].token < gs[b].token })
	out := 0
	for k := 1; k < len(gs); k++ {
		if gs[k].seq <= gs[k-1].seq {
			out++
			if out <= 5 {
				t.Errorf("%s (token %d) granted after %s (token %d)", gs[k].node, gs[k].token, gs[k-1].node, gs[k-1].token)
			}
		}
	}
	t.Logf("%d waiters, %d granted out of sequence order, %d failed; listings %d/%d, local handoffs %d/%d", i, out, failed.Load(),
		es[0].Listings(), es[1].Listings(), es[0].LocalHandoffs(), es[1].LocalHandoffs())
}
