package lock_test

// Independent review of the native first touch, turns between engines and
// the check after a one-write grant (commits 8e0c547, 74b4ecb: the multi
// that creates a missing object node, the one-write grant with seq -1 and
// its one-listing check (readAfter), a refused prediction (missed)).
// Interleavings are forced by a dialer that runs the test's own actions
// just before chosen requests of an engine reach ZooKeeper; each test
// counts things or checks order, never times them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
)

// stepDialer runs hook before each request frame an engine sends (the
// connect request aside), on the connection's send loop: whatever the hook
// does to ZooKeeper lands before that request. A hook returning true cuts
// the connection right after the request is written (applied, reply lost).
type stepDialer struct {
	mu   sync.Mutex
	hook func(op int32, p string) bool
	// drop (onceDrop): the matched request is not sent; the connection
	// closes instead (it died under the request)
	drop bool
	// refuse (onceRefuse): dials fail while set, so the cut lasts (the
	// session may expire) until let
	refuse atomic.Bool
}

func (g *stepDialer) set(f func(op int32, p string) bool) { g.mu.Lock(); g.hook = f; g.mu.Unlock() }

// once runs act before the first request for which match holds, then
// stops; the returned channel closes once act has run.
func (g *stepDialer) once(match func(op int32, p string) bool, act func() bool) <-chan struct{} {
	done := make(chan struct{})
	var fired atomic.Bool
	g.set(func(op int32, p string) bool {
		if !match(op, p) || !fired.CompareAndSwap(false, true) {
			return false
		}
		g.set(nil)
		defer close(done)
		return act()
	})
	return done
}

// onceDrop is once, the matched request not sent but lost with the
// connection.
func (g *stepDialer) onceDrop(match func(op int32, p string) bool) <-chan struct{} {
	g.mu.Lock()
	g.drop = true
	g.mu.Unlock()
	return g.once(match, func() bool { return true })
}

// onceRefuse is once, with every dial refused from then on until let.
func (g *stepDialer) onceRefuse(match func(op int32, p string) bool) <-chan struct{} {
	return g.once(match, func() bool { g.refuse.Store(true); return true })
}

func (g *stepDialer) let() { g.refuse.Store(false) }

func (g *stepDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	if g.refuse.Load() {
		return nil, errors.New("stepDialer: refused")
	}
	nc, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &stepGateConn{cuttable: cuttable{Conn: nc, name: "stepGateConn"}, g: g}, nil
}

type stepGateConn struct {
	cuttable
	g      *stepDialer
	frames int
}

func (c *stepGateConn) Write(p []byte) (int, error) {
	c.frames++
	if c.frames == 1 || c.dead.Load() {
		return c.Conn.Write(p)
	}
	c.g.mu.Lock()
	hook, drop := c.g.hook, c.g.drop
	c.g.mu.Unlock()
	op, pth, ok := requestPath(p)
	if !ok || hook == nil || !hook(op, pth) {
		return c.Conn.Write(p)
	}
	c.dead.Store(true)
	if drop {
		c.g.mu.Lock()
		c.g.drop = false
		c.g.mu.Unlock()
		c.Conn.Close()
		return c.Conn.Write(p) // use of closed network connection: never sent
	}
	n, err := c.Conn.Write(p)
	time.Sleep(30 * time.Millisecond) // the server applies it; its reply is never read
	c.Conn.Close()
	return n, err
}

// Request matchers (op codes as in opNames).
func isGrantMulti(objPath string) func(int32, string) bool { // a multi whose first op creates a child of the object
	return func(op int32, p string) bool {
		return op == 14 && path.Dir(p) == objPath && path.Base(p) != "privateLock"
	}
}

func isObjectCreate(objPath string) func(int32, string) bool { // the first touch's multi
	return func(op int32, p string) bool { return op == 14 && p == objPath }
}

func isListing(objPath string) func(int32, string) bool {
	return func(op int32, p string) bool { return (op == 12 || op == 8) && p == objPath }
}

// nth matches the n-th request (1-based) that m matches.
func nth(n int, m func(int32, string) bool) func(int32, string) bool {
	var k atomic.Int32
	return func(op int32, p string) bool { return m(op, p) && int(k.Add(1)) == n }
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s never happened", what)
	}
}

// childCzxid returns the creation zxid of the object's child node.
func childCzxid(t *testing.T, conn *zk.Conn, objPath, node string) int64 {
	t.Helper()
	ok, st, err := conn.Exists(objPath + "/" + node)
	if err != nil || !ok {
		t.Fatalf("child %s of %s: %v, exists %v", node, objPath, err, ok)
	}
	return st.Czxid
}

// namesIn reports whether the object's data names req (a substring of a
// holder's request id) as a holder.
func namesIn(t *testing.T, conn *zk.Conn, objPath, req string) bool {
	t.Helper()
	b, _, err := conn.Get(objPath)
	if err != nil {
		t.Fatalf("get %s: %v", objPath, err)
	}
	var d struct {
		H []struct {
			R string `json:"r"`
		} `json:"h"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("data of %s: %v (%q)", objPath, err, b)
	}
	for _, h := range d.H {
		if strings.Contains(h.R, req) {
			return true
		}
	}
	return false
}

// Several engines first-touch the same new objects at once (no object node
// yet: each one's first look is the creating multi): every request is
// granted, one at a time per object, with increasing tokens, and each
// object is left with its sentinel only.
func TestReviewFirstTouchRace(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	const engines, objects, rounds = 3, 6, 3
	es := make([]*lock.Engine, engines)
	for i := range es {
		es[i] = newEngine(t, zkServer.Servers(), root, native, noAudit)
	}
	// the root exists (its creation is not the race under test)
	release(t, acquire(t, es[0], "warm", lock.Foreground, lock.AcquireOptions{}))
	var refused int64
	for r := range rounds {
		chks := make([]overlapChecker, objects)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for o := range objects {
			obj := fmt.Sprintf("r%d-o%d", r, o)
			for i, e := range es {
				typ := lock.Foreground
				if (i+o)%3 == 2 {
					typ = lock.Background
				}
				wg.Go(func() {
					<-start
					g, err := e.Acquire(context.Background(), obj, typ, lock.AcquireOptions{Wait: 30 * time.Second})
					if err != nil {
						t.Errorf("%s on engine %d: %v", obj, i, err)
						return
					}
					chks[o].enter(g.Token())
					time.Sleep(2 * time.Millisecond) // a holder that stays a moment: not a condition of the test
					chks[o].leave()
					if err := g.Release(context.Background()); err != nil {
						t.Errorf("release %s: %v", obj, err)
					}
				})
			}
		}
		close(start)
		wg.Wait()
		for o := range chks {
			c := &chks[o]
			if c.grants != engines || c.overlaps != 0 || c.badToken != 0 {
				t.Errorf("round %d object %d: %d grants (want %d), %d overlaps, %d tokens not increasing", r, o, c.grants, engines, c.overlaps, c.badToken)
			}
			if k := children(t, conn, root, fmt.Sprintf("r%d-o%d", r, o)); len(k) != 1 || k[0] != "privateLock" {
				t.Errorf("round %d object %d left %v; want the sentinel only", r, o, k)
			}
		}
	}
	for _, e := range es {
		refused += e.RefusedTakes()
	}
	t.Logf("%d rounds of %d objects first-touched by %d engines; %d refused takes", rounds, objects, engines, refused)
}

// predictors is the setup of the prediction reviews: a raw connection and
// two native engines on root without the audit, the first observed by obs
// (more: more of its options).
func predictors(t *testing.T, root string, more ...func(*lock.Options)) (conn *zk.Conn, a, b *lock.Engine, obs *countObserver) {
	t.Helper()
	conn = rawConn(t, zkServer.Servers())
	obs = &countObserver{}
	a = newEngine(t, zkServer.Servers(), root, native, noAudit, func(o *lock.Options) {
		o.Observer = obs
		for _, f := range more {
			f(o)
		}
	})
	b = newEngine(t, zkServer.Servers(), root, native, noAudit)
	return conn, a, b, obs
}

// predicted leaves engine a with a prediction on obj (its own clean
// release, alone): missed, after another engine's turn refused one (the
// engine then reads before using its prediction). It returns the object
// node's data, creation zxid and version that release left, and the
// sequence number it predicts.
func predicted(t *testing.T, a, b *lock.Engine, obs *countObserver, conn *zk.Conn, objPath, obj string, missed bool) (data []byte, czxid int64, version int32, seq int64) {
	t.Helper()
	var g *lock.Grant
	for range 3 {
		g = acquire(t, a, obj, lock.Foreground, lock.AcquireOptions{})
		release(t, g)
	}
	if missed {
		release(t, acquire(t, b, obj, lock.Foreground, lock.AcquireOptions{}))
		m0 := obs.misses.Load()
		g = acquire(t, a, obj, lock.Foreground, lock.AcquireOptions{}) // refused, read, one write
		release(t, g)
		if obs.misses.Load() != m0+1 {
			t.Fatalf("after another engine's turn: %d refused predictions, want 1", obs.misses.Load()-m0)
		}
	}
	data, st, err := conn.Get(objPath)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndexByte(g.Node(), '_')
	var s int64
	if _, err := fmt.Sscan(g.Node()[i+1:], &s); err != nil {
		t.Fatalf("node %q: %v", g.Node(), err)
	}
	return data, st.Czxid, st.Version, s + 1
}

// recreate replaces the object node as an operator could (deleteall, then
// a new incarnation with the native layout) with the given free data at
// data version version, a foreground waiter made by hand on wconn, and the
// next sequence number seq: what a's prediction expects, but for the
// object node's creation zxid. It returns the waiter's path.
func recreate(t *testing.T, conn, wconn *zk.Conn, objPath string, data []byte, version int32, seq int64) string {
	t.Helper()
	acl := zk.WorldACL(zk.PermAll)
	deleteTree(t, conn, objPath)
	if _, err := conn.Multi(
		&zk.CreateRequest{Path: objPath, Data: data, Acl: acl},
		&zk.CreateRequest{Path: objPath + "/privateLock", Data: data, Acl: acl},
		&zk.CreateRequest{Path: objPath + "/privateLock/native", Acl: acl},
	); err != nil {
		t.Fatal(err)
	}
	w, err := wconn.Create(objPath+"/A_x_byhand_", nil, zk.FlagEphemeralSequential, acl)
	if err != nil {
		t.Fatal(err)
	}
	for k := int64(-1); k < seq-1; {
		p, err := conn.Create(objPath+"/pad-", nil, zk.FlagSequence, acl)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Sscan(p[len(p)-10:], &k)
		if err := conn.Delete(p, -1); err != nil {
			t.Fatal(err)
		}
		if k > seq-1 {
			t.Fatalf("setup: sequence %d already past the prediction's %d", k, seq)
		}
	}
	for v := int32(0); v < version; v++ {
		if _, err := conn.Set(objPath, data, v); err != nil {
			t.Fatal(err)
		}
	}
	if _, st, err := conn.Get(objPath); err != nil || st.Version != version {
		t.Fatalf("setup: version %v, %v; want %d", st, err, version)
	}
	return w
}

// queuedOrGranted waits until the acquire is either granted (its result
// arrives) or queued: a child of reqID under the object and the data not
// naming it. true: granted.
func queuedOrGranted(t *testing.T, conn *zk.Conn, ch <-chan asyncResult, objPath, reqID string) (asyncResult, bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case r := <-ch:
			return r, true
		default:
		}
		kids, _, err := conn.Children(objPath)
		if err != nil {
			t.Fatal(err)
		}
		mine := false
		for _, k := range kids {
			mine = mine || strings.Contains(k, "_"+reqID+"~")
		}
		if mine && !namesIn(t, conn, objPath, reqID+"~") {
			// and again: a grant in flight may have landed just now
			select {
			case r := <-ch:
				return r, true
			case <-time.After(50 * time.Millisecond):
			}
			if namesIn(t, conn, objPath, reqID+"~") {
				continue
			}
			return asyncResult{}, false
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("acquire %s neither granted nor queued", reqID)
	return asyncResult{}, false
}

// A prediction whose data version and sequence number both match, on an
// object node an operator deleted and re-created (another creation zxid)
// with a foreground waiter that is first in line: the request must not be
// granted ahead of that waiter. Without the miss the predicted write goes
// first; after one (missed) the engine reads first and finds the creation
// zxid changed.
func TestReviewFirstPredictionRecreated(t *testing.T) {
	for _, missed := range []bool{false, true} {
		t.Run(fmt.Sprintf("missed=%v", missed), func(t *testing.T) {
			root := testRoot(t, zkServer)
			conn, eA, eB, obs := predictors(t, root)
			wconn := rawConn(t, zkServer.Servers())
			objPath := root + "/pr"
			data, czxid, version, seq := predicted(t, eA, eB, obs, conn, objPath, "pr", missed)
			w := recreate(t, conn, wconn, objPath, data, version, seq)
			if _, st, _ := conn.Get(objPath); st.Czxid == czxid {
				t.Fatal("setup: same creation zxid")
			}
			m0 := obs.misses.Load()
			ch := grantAsync(context.Background(), eA, "pr", lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, RequestID: "rqA"})
			r, granted := queuedOrGranted(t, conn, ch, objPath, "rqA")
			if granted {
				if r.err == nil {
					release(t, r.g)
				}
				t.Fatalf("granted (token %d, %v) ahead of the waiter %s on a re-created object node (prediction: version %d, sequence %d)", r.g.Token(), r.err, path.Base(w), version, seq)
			}
			if !missed && obs.misses.Load() != m0+1 {
				t.Errorf("%d predicted writes not granted; want 1 (the write this test aims at)", obs.misses.Load()-m0)
			}
			if err := wconn.Delete(w, -1); err != nil {
				t.Fatal(err)
			}
			r = <-ch
			if r.err != nil {
				t.Fatal(r.err)
			}
			release(t, r.g)
		})
	}
}

// The prediction held for the data version but a waiter created a child
// since: still there, it is first in line and the request queues behind
// it; created and deleted again (it gave up), the request is granted in
// its one write. Either way after a miss (read first) or not.
func TestReviewFirstPredictionWaiterBetween(t *testing.T) {
	for _, missed := range []bool{false, true} {
		for _, stays := range []bool{true, false} {
			t.Run(fmt.Sprintf("missed=%v/stays=%v", missed, stays), func(t *testing.T) {
				root := testRoot(t, zkServer)
				conn, eA, eB, obs := predictors(t, root)
				wconn := rawConn(t, zkServer.Servers())
				objPath := root + "/pw"
				predicted(t, eA, eB, obs, conn, objPath, "pw", missed)
				w, err := wconn.Create(objPath+"/A_x_byhand_", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
				if err != nil {
					t.Fatal(err)
				}
				if !stays {
					if err := wconn.Delete(w, -1); err != nil {
						t.Fatal(err)
					}
				}
				h0 := obs.hits.Load()
				ch := grantAsync(context.Background(), eA, "pw", lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, RequestID: "rqA"})
				if !stays {
					r := <-ch
					if r.err != nil {
						t.Fatal(r.err)
					}
					if c := childCzxid(t, conn, objPath, r.g.Node()); c != r.g.Token() {
						t.Errorf("token %d, its child created at %d: not granted in its one write", r.g.Token(), c)
					}
					if obs.hits.Load() != h0 {
						t.Errorf("granted without the check (a predicted hit) though a child was created since")
					}
					release(t, r.g)
					return
				}
				r, granted := queuedOrGranted(t, conn, ch, objPath, "rqA")
				if granted {
					if r.err == nil {
						release(t, r.g)
					}
					t.Fatalf("granted (%v) ahead of the waiter %s created since the prediction", r.err, path.Base(w))
				}
				if err := wconn.Delete(w, -1); err != nil {
					t.Fatal(err)
				}
				r = <-ch
				if r.err != nil {
					t.Fatal(r.err)
				}
				release(t, r.g)
			})
		}
	}
}

// A shared first touch: a shared request of another participant created
// its child just before our one write and joined as a holder (its own
// guarded write) just before our check's listing. The listing's stat shows
// the data changed, so the check reads it: the other is a holder, not a
// waiter ahead, and our grant stands (its token the write that created our
// child). Taking the data we wrote as current would see a waiter ahead and
// give the lock back.
func TestReviewFirstSharedJoinsBeforeCheck(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	bconn := rawConn(t, zkServer.Servers())
	gate := &stepDialer{}
	eA := newEngine(t, zkServer.Servers(), root, native, noAudit, func(o *lock.Options) { o.Dialer = gate.dial; o.HolderWatchDelay = time.Minute })
	// a first touch in two writes (the node, then the grant guarded by version 0): the path under review, which a one-multi first touch falls back to
	lock.SplitFirstTouch(eA)
	release(t, acquire(t, eA, "warm", lock.Foreground, lock.AcquireOptions{}))
	objPath := root + "/sj"
	var bnode string
	joined := make(chan struct{})
	gate.once(isGrantMulti(objPath), func() bool {
		p, err := bconn.Create(objPath+"/A_s_rawB_", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		if err != nil {
			t.Error(err)
			return false
		}
		bnode = p
		gate.once(isListing(objPath), func() bool { // B's take: itself added to the holders
			defer close(joined)
			b, st, err := conn.Get(objPath)
			if err != nil {
				t.Error(err)
				return false
			}
			var d map[string]any
			if err := json.Unmarshal(b, &d); err != nil {
				t.Error(err)
				return false
			}
			h, _ := d["h"].([]any)
			d["h"] = append(h, map[string]any{"r": "rawB", "s": true})
			nb, _ := json.Marshal(d)
			if _, err := conn.Set(objPath, nb, st.Version); err != nil {
				t.Error(err)
			}
			return false
		})
		return false
	})
	g, err := eA.Acquire(context.Background(), "sj", lock.Foreground, lock.AcquireOptions{Shared: true, Wait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitClosed(t, joined, "B's join before A's check")
	if c := childCzxid(t, conn, objPath, g.Node()); c != g.Token() {
		t.Errorf("token %d, its child created at %d: the one-write grant was given back though B holds (shared), not waits", g.Token(), c)
	}
	if !namesIn(t, conn, objPath, "rawB") || !namesIn(t, conn, objPath, g.RequestID()) {
		t.Errorf("the data after A's grant does not name both shared holders")
	}
	release(t, g)
	if err := bconn.Delete(bnode, -1); err != nil {
		t.Fatal(err)
	}
}

// Two engines take turns on objects (each refuses the other's prediction
// once), then one engine alone: a refused prediction is one refused write
// per object and engine, never one per turn, no take is refused, and once
// alone the miss clears: the first cycle alone reads (the other's write
// moved the version), writes once and lists (four requests with the
// release), the second's read shows its prediction held (three), and from
// then on a cycle is the one predicted write and the release (two), not a
// read first every time.
func TestReviewFirstMissedClears(t *testing.T) {
	root := testRoot(t, zkServer)
	obsA, obsB := &countObserver{}, &countObserver{}
	set := func(obs *countObserver) func(*lock.Options) {
		return func(o *lock.Options) {
			o.Protocol, o.AuditInterval, o.HolderWatchDelay, o.Observer = lock.Native, -1, time.Minute, obs
		}
	}
	eA := newEngine(t, zkServer.Servers(), root, set(obsA))
	eB := newEngine(t, zkServer.Servers(), root, set(obsB))
	const objects, rounds, alone = 3, 6, 10
	var chk overlapChecker
	cycle := func(e *lock.Engine, obj string) {
		t.Helper()
		g := acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
		chk.enter(g.Token())
		chk.leave()
		release(t, g)
	}
	for i := range objects { // first touches and a prediction each
		cycle(eA, fmt.Sprintf("o%d", i))
		cycle(eB, fmt.Sprintf("o%d", i))
	}
	for range rounds {
		for i := range objects {
			cycle(eA, fmt.Sprintf("o%d", i))
			cycle(eB, fmt.Sprintf("o%d", i))
		}
	}
	if ma, mb := obsA.misses.Load(), obsB.misses.Load(); ma > objects || mb > objects {
		t.Errorf("refused predictions over %d turns each: A %d, B %d; want at most one per object and engine (%d)", rounds*objects, ma, mb, objects)
	}
	if r := eA.RefusedTakes() + eB.RefusedTakes(); r != 0 {
		t.Errorf("%d refused takes", r)
	}
	sid := eA.Health().SessionID
	p0, s0, t0, h0 := packets(t, sid), eA.Health().Syncs, time.Now(), obsA.hits.Load()
	for range alone {
		for i := range objects {
			cycle(eA, fmt.Sprintf("o%d", i))
		}
	}
	pk := packets(t, sid) - p0 - (eA.Health().Syncs - s0)
	pings := 1 + int64(time.Since(t0)/(eA.Health().Timeout/3))
	n := int64(alone * objects)
	t.Logf("alone after turns: %d requests for %d cycles (up to %d pings), %d predicted grants", pk, n, pings, obsA.hits.Load()-h0)
	if want := 2*n + 3*objects + pings; pk > want {
		t.Errorf("%d requests for %d cycles alone, want at most %d (two each; per object a read and a listing first, and the read that clears the miss)", pk, n, want)
	}
	if h := obsA.hits.Load() - h0; h < n-objects {
		t.Errorf("%d of %d cycles alone granted on the prediction, want all but the first per object", h, n)
	}
	if chk.overlaps != 0 || chk.badToken != 0 {
		t.Errorf("%d overlaps, %d tokens not increasing", chk.overlaps, chk.badToken)
	}
}

// pluginKeptOut runs the original plugin's algorithm on objPath for a
// moment: it must not be granted (the sentinel is in place).
func pluginKeptOut(t *testing.T, objPath string) {
	t.Helper()
	pl := &pluginLock{conn: rawConn(t, zkServer.Servers()), objPath: objPath}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if tok, err := pl.lock(ctx, "A"); err == nil {
		_ = pl.unlock()
		t.Errorf("the plugin was granted (token %d) beside the native holder", tok)
	}
}

// A participant of the original plugin under a native root during a first
// touch: it takes the object (plain object node, ephemeral privateLock)
// just before the creating multi; or it queues (its "A-" child) just
// before the one-write grant. The native request fails with ErrForeignNode
// naming the root, never granted beside it, and leaves nothing.
func TestReviewFirstPluginDuringFirstTouch(t *testing.T) {
	for _, at := range []string{"create", "grant"} {
		t.Run(at, func(t *testing.T) {
			root := testRoot(t, zkServer)
			conn := rawConn(t, zkServer.Servers())
			gate := &stepDialer{}
			eA := newEngine(t, zkServer.Servers(), root, native, noAudit, func(o *lock.Options) { o.Dialer = gate.dial })
			// a first touch in two writes (the node, then the grant guarded by version 0): the path under review, which a one-multi first touch falls back to
			lock.SplitFirstTouch(eA)
			release(t, acquire(t, eA, "warm", lock.Foreground, lock.AcquireOptions{}))
			objPath := root + "/pf"
			pl := &pluginLock{conn: rawConn(t, zkServer.Servers()), objPath: objPath}
			pctx, pcancel := context.WithCancel(context.Background())
			defer pcancel()
			type plRes struct {
				tok int64
				err error
			}
			pch := make(chan plRes, 1)
			var fired <-chan struct{}
			if at == "create" {
				fired = gate.once(isObjectCreate(objPath), func() bool {
					tok, err := pl.lock(pctx, "A")
					pch <- plRes{tok, err}
					return false
				})
			} else {
				fired = gate.once(isGrantMulti(objPath), func() bool {
					go func() { tok, err := pl.lock(pctx, "A"); pch <- plRes{tok, err} }()
					waitFor(t, 10*time.Second, "the plugin's child", func() bool {
						for _, k := range children(t, conn, root, "pf") {
							if strings.HasPrefix(k, "A-") {
								return true
							}
						}
						return false
					})
					return false
				})
			}
			g, err := eA.Acquire(context.Background(), "pf", lock.Foreground, lock.AcquireOptions{Wait: 5 * time.Second})
			waitClosed(t, fired, "the plugin's move")
			if err == nil {
				release(t, g)
				t.Fatalf("granted (token %d) with a plugin participant on the object", g.Token())
			}
			if !errors.Is(err, lock.ErrForeignNode) || !strings.Contains(err.Error(), root) {
				t.Errorf("acquire beside a plugin participant: %v; want ErrForeignNode naming %s", err, root)
			}
			if at == "create" {
				r := <-pch
				if r.err != nil {
					t.Fatalf("the plugin before the create: %v", r.err)
				}
				if err := pl.unlock(); err != nil {
					t.Fatal(err)
				}
				return
			}
			pcancel()
			if r := <-pch; r.err == nil {
				_ = pl.unlock()
				t.Errorf("the plugin was granted (token %d) on a native object", r.tok)
			}
		})
	}
}

// An operator deletes the object node (deleteall) or the sentinel during a
// first touch: after the creating multi, before the one-write grant (alone,
// with another engine first-touching the new incarnation and holding it,
// or with a hand-made waiter first in line on it); before the check's
// listing. The request is granted only when
// nobody holds or waits ahead, with the sentinel in place again (the
// original plugin is kept out), and increasing tokens.
func TestReviewFirstOperatorDeletes(t *testing.T) {
	cases := []struct {
		name  string
		match func(objPath string) func(int32, string) bool
		// act runs before the matched request; it may return a hand-made
		// waiter's path or another engine's grant, ahead of A
		act func(t *testing.T, gate *stepDialer, conn, wconn *zk.Conn, eB *lock.Engine, objPath string) (string, *lock.Grant)
	}{
		// the first touch does not read the node it made (its grant's
		// write is guarded by version 0): the tree goes before that write
		{"tree-before-grant", isGrantMulti,
			func(t *testing.T, _ *stepDialer, conn, _ *zk.Conn, _ *lock.Engine, p string) (string, *lock.Grant) {
				deleteTree(t, conn, p)
				return "", nil
			}},
		{"sentinel-before-grant", isGrantMulti,
			func(t *testing.T, _ *stepDialer, conn, _ *zk.Conn, _ *lock.Engine, p string) (string, *lock.Grant) {
				deleteTree(t, conn, p+"/privateLock")
				return "", nil
			}},
		{"tree-before-grant-other-holds", isGrantMulti,
			func(t *testing.T, _ *stepDialer, conn, _ *zk.Conn, eB *lock.Engine, p string) (string, *lock.Grant) {
				deleteTree(t, conn, p)
				return "", acquire(t, eB, path.Base(p), lock.Foreground, lock.AcquireOptions{})
			}},
		{"tree-before-grant-waiter", isGrantMulti,
			func(t *testing.T, _ *stepDialer, conn, wconn *zk.Conn, _ *lock.Engine, p string) (string, *lock.Grant) {
				b, _, err := conn.Get(p)
				if err != nil {
					t.Error(err)
					return "", nil
				}
				return recreate(t, conn, wconn, p, b, 0, 0), nil
			}},
		// The grant's multi answers with the children it left: the
		// sentinel and ours alone grant without a listing (636f60f). A
		// background waiter made by hand just before it (behind A, which
		// is foreground) makes the check list; the tree goes then.
		{"tree-before-check", isGrantMulti,
			func(t *testing.T, gate *stepDialer, conn, wconn *zk.Conn, _ *lock.Engine, p string) (string, *lock.Grant) {
				if _, err := wconn.Create(p+"/B_x_byhand_", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll)); err != nil {
					t.Error(err)
				}
				gate.once(isListing(p), func() bool {
					deleteTree(t, conn, p)
					return false
				})
				return "", nil
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := testRoot(t, zkServer)
			conn := rawConn(t, zkServer.Servers())
			wconn := rawConn(t, zkServer.Servers())
			gate := &stepDialer{}
			eA := newEngine(t, zkServer.Servers(), root, native, noAudit, func(o *lock.Options) { o.Dialer = gate.dial })
			eB := newEngine(t, zkServer.Servers(), root, native, noAudit)
			// a first touch in two writes (the node, then the grant guarded by version 0): the path under review, which a one-multi first touch falls back to
			lock.SplitFirstTouch(eA)
			release(t, acquire(t, eA, "warm", lock.Foreground, lock.AcquireOptions{}))
			objPath := root + "/od"
			var waiter string
			var other *lock.Grant
			fired := gate.once(c.match(objPath), func() bool {
				waiter, other = c.act(t, gate, conn, wconn, eB, objPath)
				return false
			})
			ch := grantAsync(context.Background(), eA, "od", lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, RequestID: "rqA"})
			waitClosed(t, fired, "the operator's deletion")
			if waiter != "" || other != nil {
				if r, granted := queuedOrGranted(t, conn, ch, objPath, "rqA"); granted {
					if r.err == nil {
						release(t, r.g)
					}
					t.Fatalf("granted (%v) ahead of the waiter %q or beside the holder %v", r.err, waiter, other != nil)
				}
				if waiter != "" {
					if err := wconn.Delete(waiter, -1); err != nil {
						t.Fatal(err)
					}
				}
				if other != nil {
					release(t, other)
				}
			}
			r := <-ch
			if r.err != nil {
				t.Fatal(r.err)
			}
			if other != nil && r.g.Token() <= other.Token() {
				t.Errorf("token %d after %d", r.g.Token(), other.Token())
			}
			if ok, _, err := conn.Exists(objPath + "/privateLock/native"); err != nil || !ok {
				t.Errorf("granted without the sentinel's mark in place (%v)", err)
			}
			pluginKeptOut(t, objPath)
			release(t, r.g)
		})
	}
}

// After a refused prediction, the one-write grant's multi is applied and
// its reply lost (the connection cut): the request gives it back once
// reconnected and queues. Another engine's request, with a lock-delay, is
// granted without one (nobody vanished); no overlap, tokens increase,
// nothing is left.
func TestReviewFirstMissedCut(t *testing.T) {
	root := testRoot(t, zkServer)
	gate := &stepDialer{}
	conn, eA, eB, obs := predictors(t, root, func(o *lock.Options) { o.Dialer = gate.dial })
	eC := newEngine(t, zkServer.Servers(), root, native, noAudit)
	objPath := root + "/mc"
	predicted(t, eA, eB, obs, conn, objPath, "mc", false)
	b := acquire(t, eB, "mc", lock.Foreground, lock.AcquireOptions{}) // moves the version A predicted
	release(t, b)
	m0 := obs.misses.Load()
	// the predicted write (refused), then the one-write grant: cut
	cut := gate.once(nth(2, isGrantMulti(objPath)), func() bool { return true })
	bg := context.Background()
	ach := grantAsync(bg, eA, "mc", lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
	waitClosed(t, cut, "the cut of the one-write grant")
	if obs.misses.Load() != m0+1 {
		t.Errorf("%d refused predictions before the cut, want 1", obs.misses.Load()-m0)
	}
	cch := grantAsync(bg, eC, "mc", lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, LockDelay: time.Minute})
	takeBothNoDelay(t, &overlapChecker{last: b.Token()}, eC, ach, cch)
}

// While the engine reads first (missed), a holder of another engine
// vanishes (its engine closes) or abandons its grant: a request with a
// lock-delay waits it out, however free the data looks; a clean release
// delays nobody.
func TestReviewFirstMissedLockDelay(t *testing.T) {
	for _, how := range []string{"release", "abandon", "close"} {
		t.Run(how, func(t *testing.T) {
			root := testRoot(t, zkServer)
			conn, eW, eB, obs := predictors(t, root)
			eV := newEngine(t, zkServer.Servers(), root, native, noAudit)
			objPath := root + "/ld"
			predicted(t, eW, eB, obs, conn, objPath, "ld", true)
			g := acquire(t, eV, "ld", lock.Foreground, lock.AcquireOptions{})
			switch how {
			case "release":
				release(t, g)
			case "abandon":
				if err := g.Abandon(context.Background()); err != nil {
					t.Fatal(err)
				}
			case "close":
				eV.Close()
			}
			d0 := eW.Health().LockDelays
			w := acquire(t, eW, "ld", lock.Foreground, lock.AcquireOptions{LockDelay: 200 * time.Millisecond})
			if w.Token() <= g.Token() {
				t.Errorf("token %d after %d", w.Token(), g.Token())
			}
			delayed := eW.Health().LockDelays - d0
			if want := int64(map[bool]int{true: 1}[how != "release"]); delayed != want {
				t.Errorf("%d lock-delays after a %s, want %d", delayed, how, want)
			}
			release(t, w)
		})
	}
}

// Two engines on one new object, the second's moves forced between the
// first's requests: B's whole first touch before A's creating multi, or
// before A's one write (B takes the node A made); or B queueing just
// after A's one write landed, foreground behind A's foreground or
// background request. A's write answered with the sentinel and A's child
// alone, so A's grant stands without a listing (636f60f: before, a
// listing checked for arrivals, and a foreground B that came before it
// sent a background A back); B comes next. Never both at once, tokens
// increase.
func TestReviewFirstTouchTwoEngines(t *testing.T) {
	cases := []struct {
		name   string
		match  func(objPath string) func(int32, string) bool
		holds  bool      // B holds by the end of the hook (A queues behind it)
		typA   lock.Type // B is foreground
		bFirst bool      // B is granted before A
		knowsB bool      // A's grant names B as its successor
	}{
		{"create", isObjectCreate, true, lock.Foreground, true, false},
		{"grant", isGrantMulti, true, lock.Foreground, true, false},
		{"after-grant-behind", isGrantMulti, false, lock.Foreground, false, false},
		{"after-grant-ahead", isGrantMulti, false, lock.Background, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := testRoot(t, zkServer)
			conn := rawConn(t, zkServer.Servers())
			gate := &stepDialer{}
			eA := newEngine(t, zkServer.Servers(), root, native, noAudit, func(o *lock.Options) { o.Dialer = gate.dial; o.HolderWatchDelay = time.Minute })
			eB := newEngine(t, zkServer.Servers(), root, native, noAudit, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
			// a first touch in two writes (the node, then the grant guarded by version 0): the path under review, which a one-multi first touch falls back to
			lock.SplitFirstTouch(eA)
			lock.SplitFirstTouch(eB)
			release(t, acquire(t, eA, "warm", lock.Foreground, lock.AcquireOptions{}))
			objPath := root + "/te"
			bg := context.Background()
			var bHeld *lock.Grant
			has := func(id string) bool {
				for _, k := range children(t, conn, root, "te") {
					if strings.Contains(k, "_"+id+"~") {
						return true
					}
				}
				return false
			}
			bchc := make(chan (<-chan asyncResult), 1)
			fired := gate.once(c.match(objPath), func() bool {
				if c.holds {
					bHeld = acquire(t, eB, "te", lock.Foreground, lock.AcquireOptions{})
					return false
				}
				go func() { // once A's multi (sent when this returns) landed
					waitFor(t, 10*time.Second, "A's child", func() bool { return has("rqA") })
					bchc <- grantAsync(bg, eB, "te", lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, RequestID: "rqB"})
					waitFor(t, 10*time.Second, "B's child", func() bool { return has("rqB") })
				}()
				return false
			})
			ach := grantAsync(bg, eA, "te", c.typA, lock.AcquireOptions{Wait: 30 * time.Second, RequestID: "rqA"})
			waitClosed(t, fired, "B's move")
			var bch <-chan asyncResult
			if !c.holds {
				select {
				case bch = <-bchc:
				case <-time.After(20 * time.Second):
					t.Fatal("B never started")
				}
			}
			var chk overlapChecker
			if c.holds {
				if r, granted := queuedOrGranted(t, conn, ach, objPath, "rqA"); granted {
					if r.err == nil {
						release(t, r.g)
					}
					t.Fatalf("A granted (%v) beside B, which holds", r.err)
				}
				chk.enter(bHeld.Token())
				chk.leave()
				release(t, bHeld)
				a := <-ach
				if a.err != nil {
					t.Fatal(a.err)
				}
				chk.enter(a.g.Token())
				chk.leave()
				release(t, a.g)
			} else {
				first, second, fn, sn := ach, bch, "A", "B"
				if c.bFirst {
					first, second, fn, sn = bch, ach, "B", "A"
				}
				var f asyncResult
				select {
				case f = <-first:
				case s := <-second:
					if s.err == nil {
						release(t, s.g)
					}
					t.Fatalf("%s granted (%v) before %s", sn, s.err, fn)
				}
				if f.err != nil {
					t.Fatal(f.err)
				}
				if c.knowsB {
					if c := childCzxid(t, conn, objPath, f.g.Node()); c != f.g.Token() {
						t.Errorf("A's token %d, its child created at %d: not granted in its one write", f.g.Token(), c)
					}
					if k := f.g.KnownNext(); len(k) != 1 || !strings.Contains(k[0], "_rqB~") {
						t.Errorf("A's grant knows %v as next, want B's child", k)
					}
				}
				chk.enter(f.g.Token())
				select {
				case s := <-second:
					if s.err == nil {
						release(t, s.g)
					}
					t.Fatalf("%s granted (%v) while %s holds", sn, s.err, fn)
				case <-time.After(50 * time.Millisecond): // a grant beside it would show here: not a condition of the test's pass
				}
				chk.leave()
				release(t, f.g)
				s := <-second
				if s.err != nil {
					t.Fatal(s.err)
				}
				chk.enter(s.g.Token())
				chk.leave()
				release(t, s.g)
			}
			if chk.overlaps != 0 || chk.badToken != 0 {
				t.Errorf("%d overlaps, %d tokens not increasing", chk.overlaps, chk.badToken)
			}
		})
	}
}

// Three engines take new objects by turns and at once, exclusive and
// shared, foreground and background (predictions refused, the one-write
// grant with its check, first touches): exclusive holders are alone,
// shared ones only with shared ones, exclusive tokens increase, nothing is
// left.
func TestReviewFirstTurnsFuzz(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	const engines, workers, iters, objects = 3, 2, 25, 4
	es := make([]*lock.Engine, engines)
	for i := range es {
		es[i] = newEngine(t, zkServer.Servers(), root, native, noAudit)
	}
	chks := make([]rwChecker, objects)
	var wg sync.WaitGroup
	for i, e := range es {
		for w := range workers {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(w)))
			wg.Go(func() {
				for range iters {
					o := rng.IntN(objects)
					shared := rng.IntN(10) < 3
					typ := lock.Foreground
					if rng.IntN(10) < 3 {
						typ = lock.Background
					}
					g, err := e.Acquire(context.Background(), fmt.Sprintf("f%d", o), typ, lock.AcquireOptions{Shared: shared, Wait: 30 * time.Second})
					if err != nil {
						t.Errorf("engine %d: %v", i, err)
						return
					}
					chks[o].enter(shared, g.Token())
					if rng.IntN(2) == 0 {
						time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
					}
					chks[o].leave(shared)
					if err := g.Release(context.Background()); err != nil {
						t.Errorf("release: %v", err)
						return
					}
					if rng.IntN(3) == 0 { // a pause: turns rather than contention
						time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
					}
				}
			})
		}
	}
	wg.Wait()
	for o := range chks {
		c := &chks[o]
		if c.violations != 0 || c.badToken != 0 {
			t.Errorf("object f%d: %d violations, %d exclusive tokens not increasing (%d grants)", o, c.violations, c.badToken, c.grants)
		}
		if k := children(t, conn, root, fmt.Sprintf("f%d", o)); len(k) > 1 {
			t.Errorf("object f%d left %v", o, k)
		}
	}
	var refused int64
	for _, e := range es {
		refused += e.RefusedTakes()
	}
	t.Logf("%d acquires on %d objects, %d refused takes", engines*workers*iters, objects, refused)
}

// A first touch that will queue anyway (a lock-delay asked: the one-write
// grant is not for it) sends no read of the node it just created: the
// read missing the node, the creating multi, the child's create, the
// view's two reads, the take and the release (seven requests a cycle).
func TestReviewFirstTouchQueueingNoExtraRead(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, native, noAudit, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
	release(t, acquire(t, e, "warm", lock.Foreground, lock.AcquireOptions{}))
	sid := e.Health().SessionID
	const n = 10
	p0, s0, t0 := packets(t, sid), e.Health().Syncs, time.Now()
	for i := range n {
		release(t, acquire(t, e, fmt.Sprintf("q%d", i), lock.Foreground, lock.AcquireOptions{LockDelay: time.Second}))
	}
	pk := packets(t, sid) - p0 - (e.Health().Syncs - s0)
	pings := 1 + int64(time.Since(t0)/(e.Health().Timeout/3))
	t.Logf("%d first touches with a lock-delay: %d requests (up to %d pings)", n, pk, pings)
	if want := 7*int64(n) + pings; pk > want {
		t.Errorf("%d requests for %d first touches that queue, want at most %d (7 each)", pk, n, want)
	}
}

// takeBothNoDelay takes the grants of ach and cch as they come, each held
// a moment, and checks that they never overlapped, that their tokens
// increased from chk's, and that eC (whose request asked for a
// lock-delay) waited none: a grant given back is no holder that vanished.
func takeBothNoDelay(t *testing.T, chk *overlapChecker, eC *lock.Engine, ach, cch <-chan asyncResult) {
	t.Helper()
	if err := takeBoth(t, chk, ach, cch); err != nil {
		t.Fatalf("%v (lock-delays %d)", err, eC.Health().LockDelays)
	}
	if chk.overlaps != 0 || chk.badToken != 0 {
		t.Errorf("%d overlaps, %d tokens not increasing", chk.overlaps, chk.badToken)
	}
	if d := eC.Health().LockDelays; d != 0 {
		t.Errorf("%d lock-delays after a given-back grant (nobody vanished)", d)
	}
}

// takeBoth takes the two grants of ach and cch one at a time as they
// come, each held a moment under chk, and releases them; an acquire's
// error is returned (the grants after it are not taken).
func takeBoth(t *testing.T, chk *overlapChecker, ach, cch <-chan asyncResult) error {
	t.Helper()
	for range 2 {
		var r asyncResult
		select {
		case r = <-ach:
		case r = <-cch:
		case <-time.After(40 * time.Second):
			t.Fatal("stuck")
		}
		if r.err != nil {
			return r.err
		}
		chk.enter(r.g.Token())
		time.Sleep(10 * time.Millisecond) // a holder that stays a moment: not a condition of the test
		chk.leave()
		release(t, r.g)
	}
	return nil
}
