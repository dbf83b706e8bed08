package lock_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/testenv"
)

// stepCutter is a dialer that cuts the connection right after the k-th
// request the engine sends about one object (a request whose path, or whose
// first operation's path for a multi, is the object node or under it): the
// server receives and applies it, its reply is never read. It counts
// requests on the wire, so the engine's other traffic (pings, the keeper's
// syncs on "/", setWatches after a reconnect) never moves the count. A plan
// of several cuts counts again from zero after each one. Reconnects are
// accepted at once.
type stepCutter struct {
	mu     sync.Mutex
	prefix string   // the object's path
	plan   []int    // requests to let through before each cut, in order
	seen   int      // requests counted since the last cut (or the start)
	ops    []string // every counted request, "|" where a cut fell
	cuts   int      // cuts made
	onCut  func(n int)
}

func (c *stepCutter) arm(prefix string, plan []int, onCut func(n int)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prefix, c.plan, c.seen, c.ops, c.cuts, c.onCut = prefix, plan, 0, nil, 0, onCut
}

// result returns how many cuts were made and the requests counted.
func (c *stepCutter) result() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cuts, strings.Join(c.ops, " ")
}

// disarm stops cutting and counting.
func (c *stepCutter) disarm() {
	c.mu.Lock()
	c.plan, c.prefix = nil, ""
	c.mu.Unlock()
}

func (c *stepCutter) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	nc, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &stepConn{cuttable: cuttable{Conn: nc, name: "stepConn"}, c: c}, nil
}

var opNames = map[int32]string{1: "create", 2: "delete", 3: "exists", 4: "getData", 5: "setData", 8: "getChildren",
	9: "sync", 12: "getChildren2", 13: "check", 14: "multi", 15: "create2", 19: "createContainer"}

// requestPath returns the path a request frame (length prefix included) is
// about, for the request types that start with one.
func requestPath(p []byte) (int32, string, bool) {
	if len(p) < 12 {
		return 0, "", false
	}
	op := int32(binary.BigEndian.Uint32(p[8:12]))
	if _, ok := opNames[op]; !ok {
		return op, "", false
	}
	body := p[12:]
	if op == 14 { // multi: each op has a header (type int32, done bool, err int32)
		if len(body) < 9 {
			return op, "", false
		}
		body = body[9:]
	}
	if len(body) < 4 {
		return op, "", false
	}
	n := int(binary.BigEndian.Uint32(body[:4]))
	if n < 0 || len(body) < 4+n {
		return op, "", false
	}
	return op, string(body[4 : 4+n]), true
}

type stepConn struct {
	cuttable
	c      *stepCutter
	frames int
}

func (s *stepConn) Write(p []byte) (int, error) {
	s.frames++
	if s.frames == 1 || s.dead.Load() { // the connect request
		return s.Conn.Write(p)
	}
	c := s.c
	c.mu.Lock()
	op, pth, ok := requestPath(p)
	cut := false
	var onCut func(int)
	if ok && c.prefix != "" && len(c.plan) > 0 && (pth == c.prefix || strings.HasPrefix(pth, c.prefix+"/")) {
		c.seen++
		c.ops = append(c.ops, opNames[op]+":"+path.Base(pth))
		if c.seen == c.plan[0] {
			cut, c.plan, c.seen = true, c.plan[1:], 0
			c.cuts++
			c.ops = append(c.ops, "|")
			onCut = c.onCut
			s.dead.Store(true)
		}
	}
	n := c.cuts
	c.mu.Unlock()
	if !cut {
		return s.Conn.Write(p)
	}
	wn, err := s.Conn.Write(p)
	time.Sleep(30 * time.Millisecond) // the server applies it; its reply is never read
	s.Conn.Close()
	if onCut != nil {
		onCut(n)
	}
	return wn, err
}

// noAudit turns the engine's own audit off, so that the requests a test
// counts are the acquire's alone and what is left is the acquire's doing.
func noAudit(o *lock.Options) { o.AuditInterval = -1 }

// Issue 23, the reproduction: the object node exists and the engine has no
// prediction, so the acquire sends its grant multi (child + privateLock)
// and lists after it. The connection is cut right after the multi (applied,
// reply lost), and again right after the first read of the recovery that
// follows (the object node; then, in the second case, privateLock). The
// recovery must not drop that error: before the fix it adopted its child,
// waited behind its own privateLock until the wait ran out and left the
// privateLock behind, blocking the object for everyone while the session
// lived.
func TestOrphanPrivateLockAfterTwoCuts(t *testing.T) {
	for _, tc := range []struct {
		name string
		plan []int // requests about the object before each cut
	}{
		{"object read cut", []int{1, 2}},      // multi | sync, getData(object): the sequence
		{"privateLock read cut", []int{1, 3}}, // multi | sync, getData(object), getData(privateLock)
		{"give-back read cut", []int{1, 4}},   // ... the give-back's own read of privateLock
		{"give-back cut", []int{1, 5}},        // ... the give-back multi
		{"children read cut", []int{1, 6}},    // ... getChildren
		{"own child read cut", []int{1, 7}},   // ... the read of our own child
		{"sync cut", []int{1, 1}},             // the recovery's first request
		{"three cuts", []int{1, 2, 2}},        // the object read, and again in the retried recovery
		{"verify listing then give-back", []int{2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := testRoot(t, zkServer)
			cutter := &stepCutter{}
			e := newEngine(t, append(zkServer.Servers(), zkServer.Servers()...), root, noAudit,
				func(o *lock.Options) { o.Dialer = cutter.dial; o.HolderWatchDelay = time.Hour })
			other := newEngine(t, zkServer.Servers(), root)
			conn := rawConn(t, zkServer.Servers())
			obj := "R2-orphan"
			name, _ := lock.EscapeObject(obj)
			// The object node exists (another engine's cycle) and e has no prediction.
			release(t, acquire(t, other, obj, lock.Foreground, lock.AcquireOptions{}))
			sess := e.Health().SessionID
			cutter.arm(path.Join(root, name), tc.plan, nil)
			g, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: 2 * time.Second})
			cuts, ops := cutter.result()
			cutter.disarm()
			t.Logf("Acquire: granted %v, err %v; requests: %s", g != nil, err, ops)
			if cuts != len(tc.plan) {
				t.Fatalf("%d cuts made, want %d (requests: %s)", cuts, len(tc.plan), ops)
			}
			if g != nil {
				release(t, g)
			}
			waitFor(t, 10*time.Second, "engine reconnected, cleanups done", func() bool {
				h := e.Health()
				return h.Connected && h.CleanupPending == 0
			})
			if got := e.Health().SessionID; got != sess {
				t.Fatalf("the session changed (0x%x → 0x%x): the scenario needs it resumed", sess, got)
			}
			waitFor(t, 5*time.Second, "no node left", func() bool { return len(children(t, conn, root, obj)) == 0 })
			h, err := other.Acquire(context.Background(), obj, lock.Background, lock.AcquireOptions{TryOnce: true})
			if err != nil {
				t.Fatalf("another engine cannot take the freed object: %v", err)
			}
			release(t, h)
		})
	}
}

// Issue 23, the two-cut sweep: for each scenario, the connection is cut
// right after the k-th request the acquire sends about the object (then its
// hold and release: k runs until the whole cycle has fewer requests), and
// again right after the j-th request that follows the first cut (the
// recovery, then the rest of the cycle and the session's cleanups: j runs
// until the second cut no longer falls). A competitor (another engine, not
// cut) starts its own acquire at the first cut, and in one scenario holds
// the object before. Every pair checks: no two grants overlap (each holds
// 10 ms), tokens increase, and once every request has ended the object is
// free (another engine's try-once acquire is granted) and no node is left.
func TestTwoCutSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("a few hundred cut-and-reconnect cycles")
	}
	t.Parallel()
	type scenario struct {
		name    string
		tweak   func(*lock.Options)
		prepare func(t *testing.T, e, other *lock.Engine, obj string) // before the cuts are armed
		holder  bool                                                  // the competitor holds first; released once our child is queued
	}
	objectExists := func(t *testing.T, _, other *lock.Engine, obj string) {
		release(t, acquire(t, other, obj, lock.Foreground, lock.AcquireOptions{}))
	}
	scenarios := []scenario{
		{name: "verify", prepare: objectExists}, // the issue's: no prediction, create then verify
		{name: "fast", prepare: func(t *testing.T, e, _ *lock.Engine, obj string) {
			release(t, acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})) // anchors the prediction
		}},
		{name: "new-object"}, // multi → NoNode → create the object node → multi → verify
		{name: "slow", tweak: func(o *lock.Options) { o.DisableFastPath = true }, prepare: objectExists},
		{name: "queued", prepare: objectExists, holder: true},
	}
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	other := newEngine(t, zkServer.Servers(), root)
	var pairs, granted, failed, overlaps, badTokens, leftovers int
	start := time.Now()
	for _, sc := range scenarios {
		cutter := &stepCutter{}
		e := newEngine(t, append(zkServer.Servers(), zkServer.Servers()...), root, noAudit, func(o *lock.Options) {
			o.Dialer = cutter.dial
			o.HolderWatchDelay = time.Hour // no holder watch: its read would move the count
			o.SessionTimeout = 6 * time.Second
			if sc.tweak != nil {
				sc.tweak(o)
			}
		})
		sess := e.Health().SessionID
		scPairs := 0
		for k := 1; ; k++ {
			done := false
			for j := 1; ; j++ {
				obj := fmt.Sprintf("%s-%d-%d", sc.name, k, j)
				name, _ := lock.EscapeObject(obj)
				if sc.prepare != nil {
					sc.prepare(t, e, other, obj)
				}
				var chk overlapChecker
				hold := func(g *lock.Grant) {
					chk.enter(g.Token())
					select {
					case <-time.After(10 * time.Millisecond):
					case <-g.Done():
					}
					chk.leave()
					_ = g.Release(context.Background()) // a cut may make it complete in the background
				}
				var wg sync.WaitGroup
				compete := func() {
					g, err := other.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: 10 * time.Second})
					if err != nil {
						t.Errorf("%s: competitor: %v", obj, err)
						return
					}
					hold(g)
				}
				ours := make(chan struct{})
				if sc.holder {
					h := acquire(t, other, obj, lock.Foreground, lock.AcquireOptions{})
					chk.enter(h.Token())
					wg.Go(func() {
						for len(children(t, conn, root, obj)) < 3 {
							select {
							case <-ours:
							case <-time.After(5 * time.Millisecond):
								continue
							}
							break
						}
						chk.leave()
						release(t, h)
					})
				}
				cutter.arm(path.Join(root, name), []int{k, j}, func(n int) {
					if n == 1 {
						wg.Go(compete)
					}
				})
				g, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: 10 * time.Second})
				if err == nil {
					hold(g)
				}
				close(ours)
				wg.Wait()
				cuts, ops := cutter.result()
				cutter.disarm()
				if cuts == 0 {
					done = true // the cycle has fewer than k requests
					break
				}
				pairs++
				scPairs++
				if err == nil {
					granted++
				} else {
					failed++
				}
				waitFor(t, 15*time.Second, "engine reconnected, cleanups done", func() bool {
					h := e.Health()
					return h.Connected && h.CleanupPending == 0
				})
				if got := e.Health().SessionID; got != sess {
					t.Fatalf("%s: the session changed (0x%x → 0x%x); the sweep needs it resumed", obj, sess, got)
				}
				deadline := time.Now().Add(5 * time.Second)
				for len(children(t, conn, root, obj)) > 0 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if left := children(t, conn, root, obj); len(left) > 0 {
					leftovers++
					t.Errorf("%s: left %v after every request ended (acquire err %v; requests: %s)", obj, left, err, ops)
				} else if h, err := other.Acquire(context.Background(), obj, lock.Background, lock.AcquireOptions{TryOnce: true}); err != nil {
					t.Errorf("%s: not free after every request ended: %v (requests: %s)", obj, err, ops)
				} else {
					release(t, h)
				}
				if chk.overlaps != 0 || chk.badToken != 0 {
					overlaps += chk.overlaps
					badTokens += chk.badToken
					t.Errorf("%s: overlaps %d, non-increasing tokens %d (requests: %s)", obj, chk.overlaps, chk.badToken, ops)
				}
				if testing.Verbose() {
					t.Logf("%s: granted %v (%v); %s", obj, err == nil, err, ops)
				}
				if cuts < 2 {
					break // fewer than j requests after the first cut
				}
			}
			if done {
				break
			}
		}
		t.Logf("%s: %d pairs", sc.name, scPairs)
	}
	t.Logf("%d pairs in %v: our acquire granted %d, failed %d; overlaps %d, non-increasing tokens %d, objects left with nodes %d",
		pairs, time.Since(start).Round(time.Second), granted, failed, overlaps, badTokens, leftovers)
}

// orphanObserver counts the audit's deletions.
type orphanObserver struct {
	mu      sync.Mutex
	deleted []string // "object/node"
}

func (o *orphanObserver) SessionState(string) {}
func (o *orphanObserver) FastPath(bool)       {}
func (o *orphanObserver) OrphanDeleted(object, node string) {
	o.mu.Lock()
	o.deleted = append(o.deleted, object+"/"+node)
	o.mu.Unlock()
}

func (o *orphanObserver) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.deleted...)
}

// Issue 23, the second line: nodes of the engine's own session that no
// acquire or grant owns (planted through the session, as a bug would leave
// them) are deleted by the audit within its period, counted and logged; a
// grant held and a request waiting on the same session, on the same object,
// keep theirs.
func TestAuditDeletesPlantedOrphans(t *testing.T) {
	root := testRoot(t, zkServer)
	obs := &orphanObserver{}
	const period = 500 * time.Millisecond
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.AuditInterval = period; o.Observer = obs })
	other := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())

	g := acquire(t, e, "AU-held", lock.Foreground, lock.AcquireOptions{})
	waited := make(chan *lock.Grant, 1)
	go func() {
		w, err := e.Acquire(context.Background(), "AU-held", lock.Background, lock.AcquireOptions{Wait: time.Minute})
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		waited <- w
	}()
	waitFor(t, 10*time.Second, "waiter queued", func() bool { return len(children(t, conn, root, "AU-held")) == 3 })
	before := children(t, conn, root, "AU-held")

	ctx := context.Background()
	planted := time.Now()
	for _, p := range []struct {
		obj   string
		child bool
	}{{"AU-pl", false}, {"AU-child", true}, {"AU-held", true}} {
		n, err := lock.PlantOrphan(ctx, e, p.obj, p.child)
		if err != nil {
			t.Fatalf("plant %s: %v", p.obj, err)
		}
		t.Logf("planted %s/%s", p.obj, n)
	}
	if h, err := other.Acquire(ctx, "AU-pl", lock.Foreground, lock.AcquireOptions{TryOnce: true}); err == nil {
		release(t, h) // free already: only if an audit deleted the planted node first
		waitFor(t, 5*time.Second, "the audit to have deleted the planted privateLock (else it did not block the object)",
			func() bool { return slices.Contains(obs.list(), "AU-pl/privateLock") })
	}
	waitFor(t, 10*period, "the audit deleted the planted nodes", func() bool { return len(obs.list()) >= 3 })
	t.Logf("deleted %v, %v after planting (period %v)", obs.list(), time.Since(planted).Round(time.Millisecond), period)
	time.Sleep(2 * period) // another audit or two: nothing more goes
	if got := obs.list(); len(got) != 3 {
		t.Errorf("audit deleted %v, want the 3 planted nodes", got)
	}
	if got := children(t, conn, root, "AU-held"); !equalSet(got, before) {
		t.Errorf("children of the held object = %v, want %v (the grant's and the waiter's)", got, before)
	}
	select {
	case <-g.Done():
		t.Fatalf("the held grant ended: %v", g.Err())
	default:
	}
	for _, obj := range []string{"AU-pl", "AU-child"} {
		h, err := other.Acquire(ctx, obj, lock.Foreground, lock.AcquireOptions{TryOnce: true})
		if err != nil {
			t.Fatalf("%s not free after the audit: %v", obj, err)
		}
		release(t, h)
	}
	release(t, g)
	if w := <-waited; w != nil {
		release(t, w)
	}
}

func equalSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]bool{}
	for _, x := range a {
		m[x] = true
	}
	for _, x := range b {
		if !m[x] {
			return false
		}
	}
	return true
}

// Issue 23: the audit also runs after every reconnect, whatever its period.
func TestAuditAfterReconnect(t *testing.T) {
	root := testRoot(t, zkServer)
	obs := &orphanObserver{}
	p := testenv.ProxyT(t, zkServer.Addr(1))
	e := newEngine(t, []string{p.Addr(), p.Addr()}, root, func(o *lock.Options) { o.AuditInterval = time.Hour; o.Observer = obs })
	conn := rawConn(t, zkServer.Servers())
	sess := e.Health().SessionID
	if _, err := lock.PlantOrphan(context.Background(), e, "AR", false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(obs.list()); n != 0 {
		t.Fatalf("audit ran without a reconnect (period 1h): %d deletions", n)
	}
	p.ResetConnections()
	waitFor(t, 10*time.Second, "the orphan deleted after the reconnect", func() bool { return len(obs.list()) > 0 })
	if left := children(t, conn, root, "AR"); len(left) != 0 {
		t.Errorf("left %v after the audit", left)
	}
	if got := e.Health().SessionID; got != sess {
		t.Fatalf("the session changed (0x%x → 0x%x): the orphan went with it, not through the audit", sess, got)
	}
	if got := obs.list(); len(got) != 1 || got[0] != "AR/privateLock" {
		t.Errorf("deletions %v, want [AR/privateLock]", got)
	}
}

// Issue 23: the audit never deletes a node that an acquire in progress or a
// grant owns, also a node whose create reply has not arrived yet. One engine
// audits back to back (every millisecond) while its acquires contend with
// another engine's on two objects: nothing here is an orphan, so any deletion
// is a bug, as is a lost grant or an overlap.
func TestAuditNeverDeletesOwnedNodes(t *testing.T) {
	root := testRoot(t, zkServer)
	obs := &orphanObserver{}
	e1 := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.AuditInterval = time.Millisecond; o.Observer = obs; o.HolderWatchDelay = -1 })
	e2 := newEngine(t, zkServer.Servers(), root)
	checks := []*overlapChecker{{}, {}}
	var lost atomic.Int64
	var wg sync.WaitGroup
	for i := range 6 {
		e := e1
		if i >= 4 {
			e = e2
		}
		wg.Go(func() {
			for c := range 40 {
				obj := i % 2
				g, err := e.Acquire(context.Background(), fmt.Sprintf("AN-%d", obj), lock.Type((i+c)%2), lock.AcquireOptions{Wait: time.Minute})
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				checks[obj].enter(g.Token())
				time.Sleep(time.Duration(c%3) * time.Millisecond)
				checks[obj].leave()
				if err := g.Release(context.Background()); err != nil {
					lost.Add(1)
					t.Errorf("release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	for i, c := range checks {
		if c.overlaps != 0 || c.badToken != 0 || c.grants != 120 {
			t.Errorf("object %d: grants %d, overlaps %d, non-increasing tokens %d", i, c.grants, c.overlaps, c.badToken)
		}
	}
	if d := obs.list(); len(d) != 0 || lost.Load() != 0 {
		t.Errorf("the audit deleted %v; grants lost %d", d, lost.Load())
	}
}

// Issue 23, operators: Inspect shows a privateLock whose holder's child is
// gone as an orphan, with its session; a grant's is not. FreeOrphan, from
// another engine, refuses a grant and a wrong token, and frees the orphan.
func TestInspectAndFreeOrphan(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, noAudit)
	op := newEngine(t, zkServer.Servers(), root) // the operator's sidecar
	ctx := context.Background()

	g := acquire(t, e, "IO-held", lock.Foreground, lock.AcquireOptions{})
	st, err := op.Inspect(ctx, "IO-held")
	if err != nil || st.Holder == nil || st.Holder.Orphan || st.Holder.Name != g.Node() {
		t.Fatalf("Inspect of a held object = %+v, %v; want holder %s, not an orphan", st, err, g.Node())
	}
	if _, err := op.FreeOrphan(ctx, "IO-held", 0); !errors.Is(err, lock.ErrNotOrphan) {
		t.Fatalf("FreeOrphan of a grant = %v, want ErrNotOrphan", err)
	}
	if g.State() != lock.Held {
		t.Fatalf("the grant is %v after FreeOrphan", g.State())
	}
	release(t, g)

	if _, err := lock.PlantOrphan(ctx, e, "IO-orphan", false); err != nil {
		t.Fatal(err)
	}
	st, err = op.Inspect(ctx, "IO-orphan")
	if err != nil || st.Holder == nil || !st.Holder.Orphan || st.Holder.Session != e.Health().SessionID || st.Holder.Name != "" {
		t.Fatalf("Inspect of a planted orphan = %+v (holder %+v), %v; want an orphan of session 0x%x", st, st.Holder, err, e.Health().SessionID)
	}
	if _, err := op.FreeOrphan(ctx, "IO-orphan", st.Holder.Token+1); !errors.Is(err, lock.ErrNoNode) {
		t.Fatalf("FreeOrphan with another token = %v, want ErrNoNode", err)
	}
	n, err := op.FreeOrphan(ctx, "IO-orphan", st.Holder.Token)
	if err != nil || !n.Orphan || n.Token != st.Holder.Token {
		t.Fatalf("FreeOrphan = %+v, %v", n, err)
	}
	h, err := op.Acquire(ctx, "IO-orphan", lock.Foreground, lock.AcquireOptions{TryOnce: true})
	if err != nil {
		t.Fatalf("the freed object cannot be taken: %v", err)
	}
	release(t, h)
	if _, err := op.FreeOrphan(ctx, "IO-orphan", 0); !errors.Is(err, lock.ErrNoNode) {
		t.Fatalf("FreeOrphan of a free object = %v, want ErrNoNode", err)
	}
}
