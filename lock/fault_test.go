package lock_test

import (
	"context"
	"errors"
	"path"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/testenv"
)

// 5. A holder cut off from ZooKeeper past the session timeout is told "lost"
// before another engine is granted the object.
func TestHolderCutOffLearnsFirst(t *testing.T) {
	root := testRoot(t, zkServer)
	p := testenv.ProxyT(t, zkServer.Addr(1))
	e1 := newEngine(t, []string{p.Addr()}, root, func(o *lock.Options) { o.SessionTimeout = 2 * time.Second })
	e2 := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())

	g1 := acquire(t, e1, "P5", lock.Foreground, lock.AcquireOptions{})
	oldSession := e1.Health().SessionID
	lostAt := make(chan time.Time, 1)
	go func() { <-g1.Done(); lostAt <- time.Now() }()
	grantedAt := make(chan time.Time, 1)
	var g2 *lock.Grant
	go func() {
		g, err := e2.Acquire(context.Background(), "P5", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
		if err != nil {
			t.Errorf("e2 Acquire: %v", err)
			close(grantedAt)
			return
		}
		g2 = g
		grantedAt <- time.Now()
	}()
	waitFor(t, 10*time.Second, "e2 queued", func() bool {
		st, err := e2.Inspect(context.Background(), "P5")
		return err == nil && len(st.Waiters) == 1
	})
	validBefore := time.Until(g1.ValidUntil())
	p.BlackHole()
	cut := time.Now()
	tLost := <-lostAt
	tGranted, ok := <-grantedAt
	if !ok {
		t.FailNow()
	}
	margin := tGranted.Sub(tLost)
	t.Logf("valid for %v before the cut; lost %v after the cut; e2 granted %v after the cut; margin %v",
		validBefore.Round(time.Millisecond), tLost.Sub(cut).Round(time.Millisecond), tGranted.Sub(cut).Round(time.Millisecond), margin.Round(time.Millisecond))
	if margin <= 0 {
		t.Fatalf("the holder learned of the loss %v after another engine was granted", -margin)
	}
	if !errors.Is(g1.Err(), lock.ErrLockLost) || !errors.Is(g1.Err(), lock.ErrSessionLost) {
		t.Fatalf("g1.Err() = %v, want ErrLockLost with ErrSessionLost", g1.Err())
	}
	if err := g1.Release(context.Background()); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("old holder Release = %v, want ErrLockLost", err)
	}
	if !g1.ValidUntil().IsZero() || g1.State() != lock.Lost {
		t.Fatalf("lost grant: ValidUntil %v State %v", g1.ValidUntil(), g1.State())
	}
	p.Heal()
	p.ResetConnections() // go-zookeeper would otherwise wait out its handshake read deadline
	waitFor(t, 20*time.Second, "e1 on a new session", func() bool {
		h := e1.Health()
		return h.Connected && h.SessionID != oldSession
	})
	name := root + "/P5"
	for _, c := range children(t, conn, root, "P5") {
		_, st, err := conn.Get(path.Join(name, c))
		if err == nil && st.EphemeralOwner == oldSession {
			t.Errorf("node %s of the old session survived", c)
		}
	}
	release(t, g2)
}

// 6. The leader of a 3-node ensemble is killed during contention: work
// continues and no two grants overlap.
func TestEnsembleLeaderKilled(t *testing.T) { leaderKilled(t, lock.Plugin) }

// 6b. The same on the native protocol, whose releases name the next holder
// in their multi: the multis in flight when the leader dies (their answers
// lost with the connection, lock.zmulti) are settled by the session's
// cleanup, and still no two grants overlap.
func TestEnsembleLeaderKilledNative(t *testing.T) { leaderKilled(t, lock.Native) }

func leaderKilled(t *testing.T, proto lock.Protocol) {
	if testing.Short() {
		t.Skip("starts a 3-node ensemble")
	}
	t.Parallel()
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{Nodes: 3})
	root := testRoot(t, z)
	var es []*lock.Engine
	for range 4 {
		es = append(es, newEngine(t, z.Servers(), root, func(o *lock.Options) { o.SessionTimeout = 6 * time.Second; o.Protocol = proto }))
	}
	var chk overlapChecker
	var afterKill, failures atomic.Int64
	var killed atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, e := range es {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				g, err := e.Acquire(context.Background(), "hot", lock.Type(i%2), lock.AcquireOptions{Wait: 20 * time.Second})
				if err != nil {
					failures.Add(1) // unavailable during the election is allowed
					time.Sleep(50 * time.Millisecond)
					continue
				}
				chk.enter(g.Token())
				time.Sleep(200 * time.Microsecond)
				chk.leave()
				if killed.Load() {
					afterKill.Add(1)
				}
				_ = g.Release(context.Background()) // may report a loss across the failover
			}
		})
	}
	waitFor(t, 30*time.Second, "contention under way", func() bool { chk.mu.Lock(); defer chk.mu.Unlock(); return chk.grants >= 100 })
	leader, err := z.Leader()
	if err != nil {
		t.Fatal(err)
	}
	if err := z.Kill(leader); err != nil {
		t.Fatal(err)
	}
	killed.Store(true)
	waitFor(t, 60*time.Second, "200 grants after the leader was killed", func() bool { return afterKill.Load() >= 200 })
	close(stop)
	wg.Wait()
	t.Logf("killed leader node %d; grants %d (after kill %d), failed acquires %d", leader, chk.grants, afterKill.Load(), failures.Load())
	if chk.overlaps != 0 || chk.badToken != 0 {
		t.Fatalf("overlaps=%d non-increasing tokens=%d", chk.overlaps, chk.badToken)
	}
}

// 7. The reply of a create is lost with the connection: the node created for
// the request is found after the reconnect, and no orphan blocks the queue.
func TestCreateReplyDropped(t *testing.T) {
	root := testRoot(t, zkServer)
	p := testenv.ProxyT(t, zkServer.Addr(1))
	// persistent object nodes: a reaped container would turn the dropped
	// create into a NoNode that never reaches the queue
	persistent := func(o *lock.Options) { o.SessionTimeout = 6 * time.Second; o.ObjectNode = lock.Persistent }
	e := newEngine(t, []string{p.Addr()}, root, persistent)
	e2 := newEngine(t, zkServer.Servers(), root, persistent)
	conn := rawConn(t, zkServer.Servers())
	t.Cleanup(func() { _ = conn.Delete(root+"/P7", -1); _ = conn.Delete(root+"/P7b", -1) })
	// the object exists (a holder), so the dropped create really queues
	release(t, acquire(t, e2, "P7", lock.Foreground, lock.AcquireOptions{}))

	dropOnce := func(obj string, appeared func([]string) bool) *lock.Grant {
		t.Helper()
		p.BlackHoleDownstream()
		type result struct {
			g   *lock.Grant
			err error
		}
		res := make(chan result, 1)
		go func() {
			g, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
			res <- result{g, err}
		}()
		waitFor(t, 10*time.Second, "the request to reach ZooKeeper", func() bool { return appeared(children(t, conn, root, obj)) })
		p.Heal()
		p.ResetConnections()
		r := <-res
		if r.err != nil {
			t.Fatalf("Acquire after the lost reply: %v", r.err)
		}
		got := children(t, conn, root, obj)
		slices.Sort(got)
		if want := []string{r.g.Node(), "privateLock"}; !slices.Equal(got, want) {
			t.Fatalf("children after recovery = %v, want %v (an orphan was left)", got, want)
		}
		return r.g
	}
	// slow path: the first acquire of an object creates its child alone
	g := dropOnce("P7", func(c []string) bool { return len(c) >= 1 })
	release(t, g)
	release(t, acquire(t, e2, "P7", lock.Foreground, lock.AcquireOptions{TryOnce: true}))

	// fast path: two lone cycles anchor the prediction, then the multi's reply is lost
	release(t, acquire(t, e, "P7b", lock.Foreground, lock.AcquireOptions{}))
	release(t, acquire(t, e, "P7b", lock.Foreground, lock.AcquireOptions{}))
	g = dropOnce("P7b", func(c []string) bool { return slices.Contains(c, "privateLock") })
	release(t, g)
	release(t, acquire(t, e2, "P7b", lock.Foreground, lock.AcquireOptions{TryOnce: true}))
}

// 8. No herd: a handoff wakes one waiter. With 4 and with 32 background
// waiters (one engine each, watching only its predecessor), the listings the
// waiters send during the drain are about one per handoff; a herd (every
// waiter re-listing on every release) would be about n/2 per handoff.
// Listings are counted, not the server's packets: those include the keepers'
// syncs, which grow per handoff when the machine is slow (issue 24).
func TestNoHerd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own ZooKeeper")
	}
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{})
	measure := func(n int) float64 {
		root := "/herd" + strconv.Itoa(n)
		slow := func(o *lock.Options) { o.SessionTimeout = 10 * time.Second }
		holderE := newEngine(t, z.Servers(), root, slow)
		var es []*lock.Engine
		for range n {
			es = append(es, newEngine(t, z.Servers(), root, slow))
		}
		hold := acquire(t, holderE, "H", lock.Foreground, lock.AcquireOptions{})
		var wg sync.WaitGroup
		for i, e := range es {
			wg.Go(func() {
				g, err := e.Acquire(context.Background(), "H", lock.Background, lock.AcquireOptions{Wait: time.Minute})
				if err != nil {
					t.Errorf("waiter %d: %v", i, err)
					return
				}
				_ = g.Release(context.Background())
			})
			waitFor(t, 20*time.Second, "waiter queued", func() bool {
				st, err := holderE.Inspect(context.Background(), "H")
				return err == nil && len(st.Waiters) == i+1
			})
		}
		waitFor(t, 20*time.Second, "watches set", func() bool {
			m, err := z.Mntr(1)
			w, _ := strconv.Atoi(m["zk_watch_count"])
			return err == nil && w >= n+1
		})
		listings := func() (sum int64) {
			for _, e := range es {
				sum += e.Listings()
			}
			return sum
		}
		before := listings()
		release(t, hold)
		wg.Wait()
		return float64(listings()-before) / float64(n)
	}
	l4 := measure(4)
	l32 := measure(32)
	t.Logf("waiters' listings per handoff: 4 waiters %.2f, 32 waiters %.2f", l4, l32)
	if l32 > 2 || l4 > 2 {
		t.Fatalf("listings per handoff %.2f (4 waiters), %.2f (32): more than the woken waiter lists: a herd", l4, l32)
	}
}

// pluginLock follows the original plugin's algorithm: persistent object
// node, A-/B- ephemeral-sequential child, children sorted by name, the first
// with no privateLock creates it; otherwise it watches the parent.
// With container, the object node is Baton's (created as a container when
// missing, as Baton renews it) rather than made persistent first; slow
// pauses between the create and the first listing (a slow or descheduled
// client: its child may wait first in line, privateLock free, while it
// does not act).
type pluginLock struct {
	conn      *zk.Conn
	objPath   string
	node      string
	container bool
	slow      time.Duration
}

func (p *pluginLock) lock(ctx context.Context, prefix string) (int64, error) {
	if !p.container {
		if _, err := p.conn.Create(p.objPath, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			return 0, err
		}
	}
	n, err := p.conn.Create(p.objPath+"/"+prefix+"-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	for p.container && err == zk.ErrNoNode { // renewed meanwhile: created again as Baton does
		if _, err = p.conn.CreateContainer(p.objPath, nil, zk.FlagContainer, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			return 0, err
		}
		n, err = p.conn.Create(p.objPath+"/"+prefix+"-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	}
	if err != nil {
		return 0, err
	}
	p.node = path.Base(n)
	time.Sleep(p.slow)
	for {
		kids, _, ev, err := p.conn.ChildrenW(p.objPath)
		if err != nil {
			return 0, err
		}
		var queue []string
		locked := false
		for _, k := range kids {
			if k == "privateLock" {
				locked = true
			} else {
				queue = append(queue, k)
			}
		}
		sort.Strings(queue)
		if queue[0] == p.node && !locked {
			if _, err := p.conn.Create(p.objPath+"/privateLock", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err == nil {
				_, st, err := p.conn.Exists(p.objPath + "/privateLock")
				if err != nil {
					return 0, err
				}
				return st.Czxid, nil
			} else if err != zk.ErrNodeExists {
				return 0, err
			}
		}
		select {
		case <-ev:
		case <-ctx.Done():
			_ = p.conn.Delete(p.objPath+"/"+p.node, -1)
			return 0, ctx.Err()
		}
	}
}

func (p *pluginLock) unlock() error {
	if err := p.conn.Delete(p.objPath+"/privateLock", -1); err != nil {
		return err
	}
	return p.conn.Delete(p.objPath+"/"+p.node, -1)
}

// 12. Mixed fleet: plugin clients and engines contend on one object (persistent
// object node): no overlap, and priority holds both ways.
func TestMixedFleetWithPlugin(t *testing.T) {
	root := testRoot(t, zkServer)
	persistent := func(o *lock.Options) { o.ObjectNode = lock.Persistent }
	e1 := newEngine(t, zkServer.Servers(), root, persistent)
	e2 := newEngine(t, zkServer.Servers(), root, persistent)
	objPath := root + "/M1"
	for _, p := range []string{"/t", root} { // the plugin expects its root to exist
		if _, err := rawConn(t, zkServer.Servers()).Create(p, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			t.Fatal(err)
		}
	}
	newPlugin := func() *pluginLock { return &pluginLock{conn: rawConn(t, zkServer.Servers()), objPath: objPath} }
	cleanupConn := rawConn(t, zkServer.Servers())
	t.Cleanup(func() { _ = cleanupConn.Delete(objPath, -1) })

	var chk overlapChecker
	var wg sync.WaitGroup
	for i := range 2 {
		pl := newPlugin()
		prefix := []string{"A", "B"}[i]
		wg.Go(func() {
			for range 60 {
				tok, err := pl.lock(context.Background(), prefix)
				if err != nil {
					t.Errorf("plugin: %v", err)
					return
				}
				chk.enter(tok)
				time.Sleep(100 * time.Microsecond)
				chk.leave()
				if err := pl.unlock(); err != nil {
					t.Errorf("plugin unlock: %v", err)
					return
				}
			}
		})
	}
	for i, e := range []*lock.Engine{e1, e2} {
		wg.Go(func() {
			for range 60 {
				g, err := e.Acquire(context.Background(), "M1", lock.Type(i), lock.AcquireOptions{Wait: time.Minute})
				if err != nil {
					t.Errorf("engine: %v", err)
					return
				}
				chk.enter(g.Token())
				time.Sleep(100 * time.Microsecond)
				chk.leave()
				if err := g.Release(context.Background()); err != nil {
					t.Errorf("engine release: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if chk.overlaps != 0 || chk.badToken != 0 || chk.grants != 240 {
		t.Fatalf("grants=%d overlaps=%d badToken=%d, want 240/0/0", chk.grants, chk.overlaps, chk.badToken)
	}

	// priority both ways
	order := make(chan string, 4)
	queued := func(n int) {
		waitFor(t, 10*time.Second, "queued", func() bool { return len(children(t, cleanupConn, root, "M1")) == n })
	}
	// (a) plugin holds; engine background waiter, then plugin foreground waiter
	ph := newPlugin()
	if _, err := ph.lock(context.Background(), "A"); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		g, err := e1.Acquire(context.Background(), "M1", lock.Background, lock.AcquireOptions{Wait: time.Minute})
		if err != nil {
			t.Errorf("engine bg: %v", err)
			return
		}
		order <- "engine-background"
		_ = g.Release(context.Background())
	})
	queued(3) // holder node, privateLock, engine's node
	pf := newPlugin()
	wg.Go(func() {
		if _, err := pf.lock(context.Background(), "A"); err != nil {
			t.Errorf("plugin fg: %v", err)
			return
		}
		order <- "plugin-foreground"
		time.Sleep(20 * time.Millisecond)
		_ = pf.unlock()
	})
	queued(4)
	if err := ph.unlock(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if a, b := <-order, <-order; a != "plugin-foreground" || b != "engine-background" {
		t.Fatalf("plugin holder: order %s, %s; want plugin-foreground first", a, b)
	}
	// (b) engine holds; plugin background waiter, then engine foreground waiter
	eh := acquire(t, e1, "M1", lock.Foreground, lock.AcquireOptions{})
	pb := newPlugin()
	wg.Go(func() {
		if _, err := pb.lock(context.Background(), "B"); err != nil {
			t.Errorf("plugin bg: %v", err)
			return
		}
		order <- "plugin-background"
		_ = pb.unlock()
	})
	queued(3)
	wg.Go(func() {
		g, err := e2.Acquire(context.Background(), "M1", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
		if err != nil {
			t.Errorf("engine fg: %v", err)
			return
		}
		order <- "engine-foreground"
		time.Sleep(20 * time.Millisecond)
		_ = g.Release(context.Background())
	})
	queued(4)
	release(t, eh)
	wg.Wait()
	if a, b := <-order, <-order; a != "engine-foreground" || b != "plugin-background" {
		t.Fatalf("engine holder: order %s, %s; want engine-foreground first", a, b)
	}
}

// The sequence counter must not wrap: near the limit the emptied object node
// is renewed, and creates past the refusal point wait for the renewal.
func TestSequenceWrapPrevented(t *testing.T) {
	defer lock.SetSeqLimits(6, 12)()
	root := testRoot(t, zkServer)
	e1 := newEngine(t, zkServer.Servers(), root)
	e2 := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())
	var seqs []int
	for range 12 {
		g := acquire(t, e1, "W", lock.Foreground, lock.AcquireOptions{})
		s, _ := strconv.Atoi(g.Node()[2:])
		seqs = append(seqs, s)
		release(t, g)
	}
	renewed := false
	for i := 1; i < len(seqs); i++ {
		if seqs[i] < seqs[i-1] {
			renewed = true
		}
		if seqs[i] >= 12 {
			t.Fatalf("sequence %d reached the refusal point: %v", seqs[i], seqs)
		}
	}
	if !renewed {
		t.Fatalf("object node never renewed: sequences %v", seqs)
	}

	// A holder keeps the object busy while others push the counter past the
	// refusal point; a new acquire must wait for the renewal, then be granted.
	h := acquire(t, e1, "W2", lock.Foreground, lock.AcquireOptions{})
	for range 12 {
		n, err := conn.Create(root+"/W2/B-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.Delete(n, -1); err != nil {
			t.Fatal(err)
		}
	}
	res := make(chan *lock.Grant, 1)
	go func() {
		g, err := e2.Acquire(context.Background(), "W2", lock.Background, lock.AcquireOptions{Wait: 30 * time.Second})
		if err != nil {
			t.Errorf("Acquire past the refusal point: %v", err)
		}
		res <- g
	}()
	time.Sleep(300 * time.Millisecond)
	release(t, h)
	g := <-res
	if g == nil {
		t.FailNow()
	}
	if s, _ := strconv.Atoi(g.Node()[2:]); s >= 12 {
		t.Fatalf("granted with sequence %d after the refusal point", s)
	}
	release(t, g)
}

// A delete that fails while disconnected is retried after the reconnect, in
// the same session, until done.
func TestCleanupRetriedAfterReconnect(t *testing.T) {
	root := testRoot(t, zkServer)
	p := testenv.ProxyT(t, zkServer.Addr(1))
	e := newEngine(t, []string{p.Addr()}, root, func(o *lock.Options) { o.SessionTimeout = 8 * time.Second })
	e2 := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())
	h := acquire(t, e2, "C1", lock.Foreground, lock.AcquireOptions{})
	session := e.Health().SessionID

	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	l0 := e.Listings()
	go func() {
		_, err := e.Acquire(ctx, "C1", lock.Background, lock.AcquireOptions{Wait: time.Minute})
		res <- err
	}()
	// Queued, and its create's answer read (it lists after it): cut while
	// that answer was in flight, the acquire ends knowing no node, and the
	// create's late failure (once the cut is noticed, seconds later)
	// queues the sweep instead (a loaded machine failed the check below).
	waitFor(t, 10*time.Second, "waiter queued", func() bool {
		return len(children(t, conn, root, "C1")) == 3 && e.Listings() > l0
	})
	p.BlackHole()
	cancel()
	var ile *lock.InstanceLockError
	if err := <-res; !errors.As(err, &ile) {
		t.Fatalf("cancelled Acquire = %v, want InstanceLockError", err)
	}
	if n := e.Health().CleanupPending; n < 1 {
		t.Fatalf("CleanupPending = %d while cut off, want ≥ 1", n)
	}
	if len(children(t, conn, root, "C1")) != 3 {
		t.Fatal("the waiter's node went away while the link was cut: the test did not exercise the retry")
	}
	p.Heal()
	p.ResetConnections()
	waitFor(t, 10*time.Second, "cleanup after reconnect", func() bool { return e.Health().CleanupPending == 0 })
	if got := e.Health().SessionID; got != session {
		t.Fatalf("session changed (%x → %x): the retry must happen in the same session", session, got)
	}
	got := children(t, conn, root, "C1")
	slices.Sort(got)
	if want := []string{h.Node(), "privateLock"}; !slices.Equal(got, want) {
		t.Fatalf("children = %v, want %v", got, want)
	}
	release(t, h)
}

// An object node reaped between cycles (container) is created again.
func TestContainerReapedBetweenCycles(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())
	reaped := 0
	for range 4 {
		release(t, acquire(t, e, "R1", lock.Foreground, lock.AcquireOptions{}))
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if ok, _, _ := conn.Exists(root + "/R1"); !ok {
				reaped++
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if reaped == 0 {
		t.Fatal("the container was never reaped: the test did not exercise re-creation")
	}
}

// The chroot suffix of zookeeper.servers is applied to every path.
func TestChroot(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), "/locks", func(o *lock.Options) { o.Chroot = root + "/chroot" })
	conn := rawConn(t, zkServer.Servers())
	t.Cleanup(func() { // persistent parents under the chroot go once the container is reaped
		waitFor(t, 10*time.Second, "object reaped", func() bool { ok, _, _ := conn.Exists(root + "/chroot/locks/X1"); return !ok })
		for _, p := range []string{root + "/chroot/locks", root + "/chroot"} {
			if err := conn.Delete(p, -1); err != nil {
				t.Errorf("delete %s: %v", p, err)
			}
		}
	})
	g := acquire(t, e, "X1", lock.Foreground, lock.AcquireOptions{})
	if ok, _, err := conn.Exists(root + "/chroot/locks/X1/" + g.Node()); !ok || err != nil {
		t.Fatalf("node not under the chroot: %v %v", ok, err)
	}
	release(t, g)
	st, err := e.Inspect(context.Background(), "X1")
	if err != nil || st.Holder != nil {
		t.Fatalf("Inspect after release = %+v, %v", st, err)
	}
}
