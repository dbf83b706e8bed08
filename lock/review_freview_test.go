package lock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
)

// Review of firstAfterLocked's cursor (listing.gonePrefix, 676c13b) on the
// plugin protocol against the real ZooKeeper: the cursor may skip only
// children this engine deleted; a live child after them (another
// participant's, first in order) stops every local handoff and every
// shortcut take of privateLock, wherever the cursor stands on the listing.

// frOrder records the plugin grants of one object in grant order (noted
// while held: mutual exclusion orders the notes) by their child's
// sequence number and the object node's incarnation (its creation zxid;
// 0: not renewed in the test). With foreground children only, grant order
// is sequence order within an incarnation: a later sequence number granted
// before an earlier one still waiting passed it over.
type frOrder struct {
	mu    sync.Mutex
	nodes []string
	incs  []int64
}

func frSeq(node string) int64 {
	i := strings.LastIndexByte(node, '-')
	n, err := strconv.ParseInt(node[i+1:], 10, 64)
	if err != nil {
		panic(fmt.Sprintf("child %q: %v", node, err))
	}
	return n
}

func (o *frOrder) note(node string) { o.noteIn(node, 0) }

func (o *frOrder) noteIn(node string, inc int64) {
	o.mu.Lock()
	o.nodes = append(o.nodes, node)
	o.incs = append(o.incs, inc)
	o.mu.Unlock()
}

func (o *frOrder) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.nodes)
}

// violations: grants whose sequence number is not above the one before in
// the same incarnation, or of an incarnation older than the one before.
func (o *frOrder) violations() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var bad []string
	for i := 1; i < len(o.nodes); i++ {
		switch {
		case o.incs[i] < o.incs[i-1]:
			bad = append(bad, fmt.Sprintf("%s (object node %d) granted after %s of a newer one (%d) (grant %d)", o.nodes[i], o.incs[i], o.nodes[i-1], o.incs[i-1], i))
		case o.incs[i] == o.incs[i-1] && frSeq(o.nodes[i]) <= frSeq(o.nodes[i-1]):
			bad = append(bad, fmt.Sprintf("%s granted after %s (grant %d)", o.nodes[i], o.nodes[i-1], i))
		}
	}
	return bad
}

// incarnations counts the object node incarnations grants were seen in.
func (o *frOrder) incarnations() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for i, c := range o.incs {
		if i == 0 || c != o.incs[i-1] {
			n++
		}
	}
	return n
}

// frWaiter is a foreground Acquire in the background: once granted it is
// noted (chk, order) and released at once; done gets its outcome.
type frWaiter struct {
	cancel context.CancelFunc
	done   chan error
}

func frWait(e *lock.Engine, obj string, chk *overlapChecker, order *frOrder) *frWaiter {
	ctx, cancel := context.WithCancel(context.Background())
	w := &frWaiter{cancel: cancel, done: make(chan error, 1)}
	go func() {
		g, err := e.Acquire(ctx, obj, lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
		if err != nil {
			w.done <- err
			return
		}
		chk.enter(g.Token())
		order.note(g.Node())
		chk.leave()
		w.done <- g.Release(context.Background())
	}()
	return w
}

// frQueued counts obj's children but privateLock.
func frQueued(t *testing.T, conn *zk.Conn, root, obj string) int {
	n := 0
	for _, c := range children(t, conn, root, obj) {
		if c != "privateLock" {
			n++
		}
	}
	return n
}

// frGaveUp fails t unless w ended with an InstanceLockError (cancelled).
func frGaveUp(t *testing.T, w *frWaiter, who string) {
	t.Helper()
	select {
	case err := <-w.done:
		var ile *lock.InstanceLockError
		if !errors.As(err, &ile) {
			t.Fatalf("%s cancelled: %v, want an InstanceLockError", who, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: still waiting 30 s after its cancel", who)
	}
}

// A plugin participant's child R (created, not yet listed: the original
// plugin between its create and its getChildren, or a slow one) sits in
// the middle of one engine's queue:
//
//	H0 W1 W2 W3 W4 R X1 W5 X2 W6   (H0 holds; W, X this engine's)
//
// X1 and X2 give up (deleted and known gone out of order, behind a live
// child: W5 and W6, woken, must not take privateLock); H0's release
// drains W1..W4 by local handoffs (the cursor walks H0..W3 on the latest
// listing, one child per handoff); W4's release is the ordinary one
// (nobody of ours watches it). Then, with the cursor on that listing
// standing right before R, W5 gives up: W6 is woken, and the shortcut's
// firstAfter must stop at R (alive, not gone) instead of finding
// everything ahead of W6 gone or watched. Nobody is granted while R
// lives; once R is deleted, W6 is. Grants in sequence order, one holder
// at a time, tokens increasing.
//
// Catches a cursor that skips one child too many past the gone prefix
// (the first live child after it), or a scan from the cursor that checks
// only the child right before the node (watched) and not the others
// between the cursor and it: either lets W6 (or W5) take privateLock
// while R waits ahead of it.
func TestReviewFreviewDrainStopsAtLiveChild(t *testing.T) {
	root := testRoot(t, zkServer)
	const obj = "FR"
	objPath := path.Join(root, obj)
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.ObjectNode = lock.Persistent; o.HolderWatchDelay = time.Minute })
	conn := rawConn(t, zkServer.Servers())
	plugin := rawConn(t, zkServer.Servers()) // R's session
	t.Cleanup(func() { _ = conn.Delete(objPath, -1) })
	var chk overlapChecker
	var order frOrder
	h0 := acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
	chk.enter(h0.Token())
	order.note(h0.Node())

	queued := 1
	queue := func() *frWaiter {
		w := frWait(e, obj, &chk, &order)
		queued++
		waitFor(t, 10*time.Second, fmt.Sprintf("%d children queued", queued), func() bool { return frQueued(t, conn, root, obj) == queued })
		return w
	}
	var ws []*frWaiter
	for range 4 {
		ws = append(ws, queue())
	}
	rPath, err := plugin.Create(objPath+"/A-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	queued++
	x1, w5, x2, w6 := queue(), queue(), queue(), queue()
	// every waiter watching a child of its own (and offered: the offer
	// precedes the watch; the order must hold either way)
	waitFor(t, 10*time.Second, "8 offers", func() bool { return e.HandoffOffers(obj) == 8 })

	// W5 and W6, woken by X1's and X2's deletion, list again and offer
	// themselves anew (to R's holder, to W5's): counted, so that their
	// listing is answered before H0's release (one in flight would make a
	// handoff's firstAfter say no).
	var reoffers atomic.Int64
	restore := lock.SetHandoffHook(func(s string) {
		if s == "offered" {
			reoffers.Add(1)
		}
	})
	defer restore()
	x1.cancel()
	frGaveUp(t, x1, "X1")
	x2.cancel()
	frGaveUp(t, x2, "X2")
	waitFor(t, 10*time.Second, "X1, X2 gone", func() bool { return frQueued(t, conn, root, obj) == queued-2 })
	// (not offered again: one of them found itself first and waits on
	// privateLock, which H0 holds, instead of watching the child ahead)
	waitFor(t, 10*time.Second, "W5 and W6 listing again and offering themselves anew (if not: a wrong first)", func() bool { return reoffers.Load() >= 2 })
	restore()
	if n := order.count(); n != 1 {
		t.Fatalf("%d grants with H0 holding", n)
	}

	l0 := e.LocalHandoffs()
	chk.leave()
	release(t, h0)
	for i, w := range ws {
		select {
		case err := <-w.done:
			if err != nil {
				t.Fatalf("W%d: %v", i+1, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("W%d not granted within 30 s", i+1)
		}
	}
	if n := e.LocalHandoffs() - l0; n != 4 {
		t.Errorf("%d local handoffs for W1..W4, want 4 (the drain did not run the cursor)", n)
	}
	// W4 released: privateLock free, R first, never granted (it does not list)
	waitFor(t, 10*time.Second, "W4's release", func() bool { return frQueued(t, conn, root, obj) == 3 })

	w5.cancel()
	frGaveUp(t, w5, "W5")
	select {
	case err := <-w6.done:
		t.Fatalf("W6 ended (%v) with R (%s) waiting ahead of it", err, path.Base(rPath))
	case <-time.After(500 * time.Millisecond): // a wrong "first" takes privateLock at once
	}
	if ok, _, err := conn.Exists(objPath + "/privateLock"); err != nil || ok {
		t.Fatalf("privateLock exists (%v, %v) while R waits first", ok, err)
	}
	if err := plugin.Delete(rPath, -1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w6.done:
		if err != nil {
			t.Fatalf("W6: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("W6 not granted within 30 s of R's deletion")
	}
	for _, b := range order.violations() {
		t.Error(b)
	}
	chk.verify(t, 6)
	waitFor(t, 10*time.Second, "nothing left", func() bool { return frQueued(t, conn, root, obj) == 0 })
}

// Long local drains on one engine (ten waiters in a loop, so its queue is
// long and mostly its own), another engine's waiters and the original
// plugin's algorithm (slow to list after its create: its child waits
// first, alive, privateLock free) interleaved, waits cut short at random
// moments (gone children out of order, behind live ones; cancels racing
// handoffs), all foreground on one object node, under the race detector
// (the cursor is written under objMu by handoffs and wake-ups alike).
// Every grant in sequence order, one holder at a time, tokens increasing,
// and the local handoffs that run the cursor did happen.
//
// Catches (every run, a dozen order violations) a scan from the cursor
// that checks only the child right before the node, not every child
// between the cursor and it. A cursor one child too far (the first live
// one) it catches only by chance (TestReviewFreviewDrainStopsAtLiveChild
// does); a cursor outliving a drop from gone or a change of listing it
// cannot tell (a drop removes only children the newer listing no longer
// shows): the unit tests in listing_internal_test.go do.
func TestReviewFreviewDrainsInterleaved(t *testing.T) {
	root := testRoot(t, zkServer)
	const obj = "FI"
	objPath := path.Join(root, obj)
	persistent := func(o *lock.Options) { o.ObjectNode = lock.Persistent; o.HolderWatchDelay = 5 * time.Millisecond }
	e1 := newEngine(t, zkServer.Servers(), root, persistent)
	e2 := newEngine(t, zkServer.Servers(), root, persistent)
	conn := rawConn(t, zkServer.Servers())
	for _, p := range []string{"/t", root, objPath} { // the plugin expects the object node to exist
		if _, err := conn.Create(p, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = conn.Delete(objPath, -1) })
	const plugins, pluginRounds = 2, 15
	var chk overlapChecker
	var order frOrder
	granted, gaveUp := frStress(t, e1, e2, obj, objPath, &chk, frLoad{
		engine1: 10, engine2: 2, rounds: 30, plugins: plugins, pluginRounds: pluginRounds, seed: 100, stream: 3, hold: true,
		note: func(node string) { order.note(node) },
	})
	t.Logf("granted %d (+%d plugin), gave up %d, local handoffs %d/%d, listings %d/%d", granted, plugins*pluginRounds, gaveUp,
		e1.LocalHandoffs(), e2.LocalHandoffs(), e1.Listings(), e2.Listings())
	for _, b := range order.violations() {
		t.Error(b)
	}
	chk.verify(t, int(granted)+plugins*pluginRounds)
	if e1.LocalHandoffs() < 20 {
		t.Errorf("%d local handoffs on the draining engine: the test did not exercise the cursor", e1.LocalHandoffs())
	}
	waitFor(t, 10*time.Second, "nothing left", func() bool { return frQueued(t, conn, root, obj) == 0 })
}

// frLoad is frStress's load: engine1 and engine2 goroutines of rounds
// acquires each on e1 and e2 (a quarter cancelled at a random moment;
// with hold, a third held up to 2 ms), plugins goroutines of pluginRounds
// locks each by the original plugin's algorithm, slow to list; seeds from
// seed (e1), seed+100 (e2), seed+200 (plugins) on PCG stream stream. note
// gets each grant's child while it is held.
type frLoad struct {
	engine1, engine2, rounds, plugins, pluginRounds int
	seed, stream                                    uint64
	hold                                            bool
	note                                            func(node string)
}

// frStress runs ld on obj (objPath) under chk, until every goroutine is
// done, and returns the engines' grants and the acquires given up.
func frStress(t *testing.T, e1, e2 *lock.Engine, obj, objPath string, chk *overlapChecker, ld frLoad) (granted, gaveUp int64) {
	var nGranted, nGaveUp atomic.Int64
	var wg sync.WaitGroup
	run := func(e *lock.Engine, seed uint64) {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, ld.stream))
			for range ld.rounds {
				g := frAcquireOrCancel(t, e, obj, rng)
				if g == nil {
					nGaveUp.Add(1)
					continue
				}
				nGranted.Add(1)
				chk.enter(g.Token())
				ld.note(g.Node())
				if ld.hold && rng.IntN(3) == 0 {
					time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
				}
				chk.leave()
				if err := g.Release(context.Background()); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		})
	}
	for i := range ld.engine1 {
		run(e1, ld.seed+uint64(i))
	}
	for i := range ld.engine2 {
		run(e2, ld.seed+100+uint64(i))
	}
	for i := range ld.plugins {
		wg.Go(func() { // the original plugin's algorithm beside them, slow to list
			pl := &pluginLock{conn: rawConn(t, zkServer.Servers()), objPath: objPath, container: true}
			rng := rand.New(rand.NewPCG(ld.seed+200+uint64(i), ld.stream))
			for range ld.pluginRounds {
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
				pl.slow = time.Duration(rng.IntN(40000)) * time.Microsecond
				tok, err := pl.lock(context.Background(), "A")
				if err != nil {
					t.Errorf("plugin: %v", err)
					return
				}
				chk.enter(tok)
				ld.note(pl.node)
				chk.leave()
				if err := pl.unlock(); err != nil {
					t.Errorf("plugin unlock: %v", err)
				}
			}
		})
	}
	wg.Wait()
	return nGranted.Load(), nGaveUp.Load()
}

// frAcquireOrCancel acquires obj on e, cancelling the wait at a random
// moment in a quarter of the calls; nil when the wait was given up (a
// cancellation, not an error).
func frAcquireOrCancel(t *testing.T, e *lock.Engine, obj string, rng *rand.Rand) *lock.Grant {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if rng.IntN(4) == 0 {
		time.AfterFunc(time.Duration(rng.IntN(30000))*time.Microsecond, cancel)
	}
	g, err := e.Acquire(ctx, obj, lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
	if err != nil {
		var ile *lock.InstanceLockError
		if !errors.As(err, &ile) {
			t.Errorf("acquire: %v", err)
		}
		return nil
	}
	return g
}

// The drains of TestReviewFreviewDrainsInterleaved across renewals of the
// object node (sequence limits lowered: past 24 a release deletes the
// emptied node, past 40 a create waits for the renewal; ten or so nodes
// per run), the engines keeping their object state through a renewal
// while a waiter of theirs is active: names repeat in the new node, names
// this engine deleted in the old one among them. Grants in sequence order
// within each node, the nodes in order, one holder at a time, tokens
// increasing, renewals and local handoffs seen. A broad check (a scan
// checking only the node's predecessor fails it); the renewal's own hazard
// (a new child taken for an old one deleted) is pinned down by
// TestReviewFreviewRenewedNamesNotGone: here the engines' state is mostly
// reset (no request active) before a name comes round again.
func TestReviewFreviewDrainsAcrossRenewals(t *testing.T) {
	defer lock.SetSeqLimits(24, 40)()
	root := testRoot(t, zkServer)
	const obj = "FW"
	objPath := path.Join(root, obj)
	fast := func(o *lock.Options) { o.HolderWatchDelay = 5 * time.Millisecond }
	e1 := newEngine(t, zkServer.Servers(), root, fast)
	e2 := newEngine(t, zkServer.Servers(), root, fast)
	conn := rawConn(t, zkServer.Servers())
	for _, p := range []string{"/t", root} {
		if _, err := conn.Create(p, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			t.Fatal(err)
		}
	}
	const plugins, pluginRounds = 2, 12
	var chk overlapChecker
	var order frOrder
	// inc: the object node's incarnation, read while its child is held
	inc := func() int64 {
		_, st, err := conn.Exists(objPath)
		if err != nil || st == nil {
			t.Errorf("object node while held: %v", err)
			return 0
		}
		return st.Czxid
	}
	granted, gaveUp := frStress(t, e1, e2, obj, objPath, &chk, frLoad{
		engine1: 8, engine2: 2, rounds: 25, plugins: plugins, pluginRounds: pluginRounds, seed: 400, stream: 5,
		note: func(node string) { order.noteIn(node, inc()) },
	})
	t.Logf("granted %d (+%d plugin), gave up %d, object nodes %d, local handoffs %d/%d, listings %d/%d", granted, plugins*pluginRounds,
		gaveUp, order.incarnations(), e1.LocalHandoffs(), e2.LocalHandoffs(), e1.Listings(), e2.Listings())
	for _, b := range order.violations() {
		t.Error(b)
	}
	chk.verify(t, int(granted)+plugins*pluginRounds)
	if order.incarnations() < 3 {
		t.Errorf("grants in %d object nodes: the test did not renew it", order.incarnations())
	}
	if e1.LocalHandoffs() < 10 {
		t.Errorf("%d local handoffs on the draining engine: the test did not exercise the cursor", e1.LocalHandoffs())
	}
}

// frHold is an Acquire in the background whose grant is handed over, held.
func frHold(t *testing.T, e *lock.Engine, obj string) chan *lock.Grant {
	ch := make(chan *lock.Grant, 1)
	go func() {
		g, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
		if err != nil {
			t.Errorf("acquire: %v", err)
		}
		ch <- g
	}()
	return ch
}

// Names repeat in a renewed object node, and the engine keeps its object
// state (objState.gone among it) through the renewal while a request of
// its own is active. Old node: H0 (A-0000000000) and W1 (A-0000000002)
// of this engine, deleted (known gone); Z, created past the refusal
// point, waits for the renewal (active throughout). New node: Z
// (A-0000000000) holds; R (A-0000000002: the name W1 had) is a plugin
// participant's child that waits first once Z is gone without listing; Q
// (A-0000000003) another's, watched by Y (A-0000000004, this engine's).
// Z releases, Q gives up: Y, woken, must not find itself first (R alive
// ahead of it, its name in gone only if the old node's entries outlived
// the renewal); nobody is granted while R lives, Y once R is deleted.
//
// Catches gone entries of the old node taken for children of the new one
// (gone not emptied of what a listing of the new node reflects, e.g. a
// cursor or a gone set kept by name across the renewal): Y takes
// privateLock with R waiting ahead of it.
func TestReviewFreviewRenewedNamesNotGone(t *testing.T) {
	defer lock.SetSeqLimits(100, 8)()
	root := testRoot(t, zkServer)
	const obj = "FN"
	objPath := path.Join(root, obj)
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
	conn := rawConn(t, zkServer.Servers())
	plugin := rawConn(t, zkServer.Servers())
	var chk overlapChecker
	var order frOrder
	h0 := acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
	if h0.Node() != "A-0000000000" {
		t.Fatalf("first child %s, want A-0000000000", h0.Node())
	}
	chk.turn(h0)
	w1 := frWait(e, obj, &chk, &order)
	waitFor(t, 10*time.Second, "W1 offered", func() bool { return e.HandoffOffers(obj) == 1 })
	if kids := children(t, conn, root, obj); !slices.Contains(kids, "A-0000000002") {
		t.Fatalf("children %v: W1 is not A-0000000002", kids)
	}
	// push the counter to the refusal point (another client's creates)
	for {
		n, err := conn.Create(objPath+"/B-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.Delete(n, -1); err != nil {
			t.Fatal(err)
		}
		if frSeq(n) >= 8 {
			break
		}
	}
	_, st0, err := conn.Exists(objPath)
	if err != nil {
		t.Fatal(err)
	}
	zch := frHold(t, e, obj)
	// Z created past the refusal point and deleted its child: it waits
	// for the renewal
	waitFor(t, 10*time.Second, "Z waiting for the renewal", func() bool {
		_, st, err := conn.Exists(objPath)
		return err == nil && st.Cversion >= st0.Cversion+2 && frQueued(t, conn, root, obj) == 2
	})
	release(t, h0) // to W1 (local), whose release empties the old node: Z renews it
	if err := <-w1.done; err != nil {
		t.Fatalf("W1: %v", err)
	}
	var z *lock.Grant
	select {
	case z = <-zch:
	case <-time.After(30 * time.Second):
		t.Fatal("Z not granted in the renewed node")
	}
	if z == nil {
		t.FailNow()
	}
	chk.enter(z.Token())
	order.note(z.Node())
	_, st1, err := conn.Exists(objPath)
	if err != nil || st1.Czxid == st0.Czxid || z.Node() != "A-0000000000" {
		t.Fatalf("Z holds %s in object node %d (was %d; %v): not renewed as expected", z.Node(), st1.Czxid, st0.Czxid, err)
	}
	rPath, err := plugin.Create(objPath+"/A-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	qPath, err := plugin.Create(objPath+"/A-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	if path.Base(rPath) != "A-0000000002" || path.Base(qPath) != "A-0000000003" {
		t.Fatalf("R %s, Q %s: want A-0000000002, A-0000000003", rPath, qPath)
	}
	y := frWait(e, obj, &chk, &order)
	waitFor(t, 10*time.Second, "Y offered (watching Q)", func() bool { return e.HandoffOffers(obj) == 1 })
	chk.leave()
	release(t, z)
	if err := plugin.Delete(qPath, -1); err != nil { // Q gives up: Y is woken
		t.Fatal(err)
	}
	select {
	case err := <-y.done:
		t.Fatalf("Y ended (%v) with R (%s) waiting ahead of it", err, path.Base(rPath))
	case <-time.After(500 * time.Millisecond): // a wrong "first" takes privateLock at once
	}
	if err := plugin.Delete(rPath, -1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-y.done:
		if err != nil {
			t.Fatalf("Y: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Y not granted within 30 s of R's deletion")
	}
	if got, want := fmt.Sprint(order.nodes), "[A-0000000002 A-0000000000 A-0000000004]"; got != want {
		t.Errorf("grants after H0: %s, want W1, Z, Y: %s", got, want)
	}
	chk.verify(t, 4)
}
