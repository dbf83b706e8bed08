package lock_test

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/testenv"
)

// Review of 636f60f: a native fast acquire after a read is granted from its
// multi's answer when the setData's stat counts two children (the sentinel
// and ours), without the listing that checked that nobody queued.

// faHook sets the fast-multi hook for the object obj: f runs once, at the
// first fast multi on obj (later ones, of this or another engine, pass
// through untouched: a hook that blocks must not block them). ran reports
// whether it ran.
func faHook(t *testing.T, obj string, f func(objPath string)) (ran func() bool, undo func()) {
	t.Helper()
	var fired atomic.Bool
	var done atomic.Bool
	undo = lock.SetFastMultiHook(func(objPath string) {
		if !strings.HasSuffix(objPath, "/"+obj) || !fired.CompareAndSwap(false, true) {
			return
		}
		f(objPath)
		done.Store(true)
	})
	t.Cleanup(undo)
	return done.Load, undo
}

// faPrime makes obj's object node (with its sentinel) on another engine,
// so that e, which never touched obj, reads it and takes it with the fast
// multi guarded by the version read (the path under review), not with a
// prediction of its own.
func faPrime(t *testing.T, other *lock.Engine, obj string) {
	t.Helper()
	release(t, acquire(t, other, obj, lock.Foreground, lock.AcquireOptions{}))
}

// faKids lists the children of root/obj but the sentinel.
func faKids(t *testing.T, conn *zk.Conn, objPath string) []string {
	t.Helper()
	kids, _, err := conn.Children(objPath)
	if err != nil {
		t.Fatalf("children of %s: %v", objPath, err)
	}
	var out []string
	for _, k := range kids {
		if k != "privateLock" {
			out = append(out, k)
		}
	}
	return out
}

// faDeleteAll deletes p and everything under it (an operator's deleteall).
func faDeleteAll(conn *zk.Conn, p string) error {
	kids, _, err := conn.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, k := range kids {
		if err := faDeleteAll(conn, p+"/"+k); err != nil {
			return err
		}
	}
	if err := conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	return nil
}

// The Stat semantics the change relies on, on this server: the setData of
// a multi answers with the node's stat as the multi left it at that
// operation, so NumChildren counts a create earlier in the same multi (and
// not one later in it), and any child another session made before. And
// the sequence number a create gets counts the parent's creates only
// (deletes do not move it): the prediction "seq+1" means "nobody created
// since".
func TestReviewFastAloneStatCountsMultiCreate(t *testing.T) {
	conn := rawConn(t, zkServer.Servers())
	other := rawConn(t, zkServer.Servers())
	faStatChecks(t, conn, other, "/t/review_fastalone_raw")
}

// The same on a three-node ensemble, through each node in turn (two of
// them followers: the answer is made where the session is).
func TestReviewFastAloneStatCountsMultiCreateEnsemble(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own ZooKeeper ensemble")
	}
	t.Parallel()
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{Nodes: 3})
	for node := 1; node <= 3; node++ {
		t.Run(fmt.Sprint("node", node), func(t *testing.T) {
			conn := rawConn(t, []string{z.Addr(node)})
			other := rawConn(t, []string{z.Addr(node%3 + 1)})
			faStatChecks(t, conn, other, fmt.Sprint("/raw", node))
		})
	}
}

// faStatChecks runs the checks of TestReviewFastAloneStatCountsMultiCreate
// under base (made afresh, deleted after) through conn; other is another
// session.
func faStatChecks(t *testing.T, conn, other *zk.Conn, base string) {
	t.Helper()
	acl := zk.WorldACL(zk.PermAll)
	t.Cleanup(func() { _ = faDeleteAll(conn, base) })
	if err := faDeleteAll(conn, base); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(base); i++ {
		if base[i] == '/' {
			if _, err := conn.Create(base[:i], nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				t.Fatal(err)
			}
		}
	}
	if _, err := conn.Create(base, nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	obj := base + "/o"
	if _, err := conn.Multi(
		&zk.CreateRequest{Path: obj, Data: []byte(`{"native":1}`), Acl: acl},
		&zk.CreateRequest{Path: obj + "/privateLock", Acl: acl},
		&zk.CreateRequest{Path: obj + "/privateLock/native", Acl: acl},
	); err != nil {
		t.Fatal(err)
	}
	version := int32(0)
	fastMulti := func(req string) (child string, st *zk.Stat) {
		t.Helper()
		res, err := conn.Multi(
			&zk.CreateRequest{Path: obj + "/A_x_" + req + "_", Acl: acl, Flags: zk.FlagEphemeralSequential},
			&zk.SetDataRequest{Path: obj, Data: []byte(`{"native":1,"h":[{"r":"` + req + `"}]}`), Version: version},
			&zk.CheckVersionRequest{Path: obj + "/privateLock/native", Version: -1},
		)
		if err != nil {
			t.Fatalf("multi: %v", err)
		}
		version = res[1].Stat.Version
		return path.Base(res[0].String), res[1].Stat
	}
	seqOf := func(name string) int {
		var n int
		if _, err := fmt.Sscanf(name[len(name)-10:], "%d", &n); err != nil {
			t.Fatalf("sequence of %s: %v", name, err)
		}
		return n
	}

	// alone: the sentinel and ours
	c1, st := fastMulti("r1")
	if st.NumChildren != 2 {
		t.Fatalf("alone: the multi's setData stat counts %d children, want 2 (the sentinel and the create before it)", st.NumChildren)
	}
	// ours deleted, then a create of the multi again: the sequence number
	// counts creates only (one: ours), not the delete
	if err := conn.Delete(obj+"/"+c1, -1); err != nil {
		t.Fatal(err)
	}
	c2, st := fastMulti("r2")
	if st.NumChildren != 2 {
		t.Fatalf("alone again: %d children, want 2", st.NumChildren)
	}
	if seqOf(c2) != seqOf(c1)+1 {
		t.Fatalf("sequence after create+delete: %s after %s, want one more (the prediction seq+1)", c2, c1)
	}
	if err := conn.Delete(obj+"/"+c2, -1); err != nil {
		t.Fatal(err)
	}
	// another session's child, made before: counted (and it moves the
	// sequence even once deleted)
	w, err := other.Create(obj+"/A_x_w_", nil, zk.FlagEphemeralSequential, acl)
	if err != nil {
		t.Fatal(err)
	}
	c3, st := fastMulti("r3")
	if st.NumChildren != 3 {
		t.Fatalf("beside a waiter: %d children, want 3", st.NumChildren)
	}
	if seqOf(c3) != seqOf(c2)+2 {
		t.Fatalf("sequence after another's create: %s after %s, want two more", c3, c2)
	}
	for _, p := range []string{w, obj + "/" + c3} {
		if err := conn.Delete(p, -1); err != nil {
			t.Fatal(err)
		}
	}
	// the order within the multi matters: a setData before the create
	// does not count it (fast puts the create first)
	res, err := conn.Multi(
		&zk.SetDataRequest{Path: obj, Data: []byte(`{"native":1}`), Version: version},
		&zk.CreateRequest{Path: obj + "/A_x_r4_", Acl: acl, Flags: zk.FlagEphemeralSequential},
	)
	if err != nil {
		t.Fatal(err)
	}
	version = res[0].Stat.Version
	if res[0].Stat.NumChildren != 1 {
		t.Fatalf("setData before the create: %d children, want 1", res[0].Stat.NumChildren)
	}
	// a parked handoff's order (delete, create, setData): the delete is
	// counted too
	res, err = conn.Multi(
		&zk.DeleteRequest{Path: res[1].String, Version: -1},
		&zk.CreateRequest{Path: obj + "/A_x_r5_", Acl: acl, Flags: zk.FlagEphemeralSequential},
		&zk.SetDataRequest{Path: obj, Data: []byte(`{"native":1}`), Version: version},
	)
	if err != nil {
		t.Fatal(err)
	}
	if res[2].Stat.NumChildren != 2 {
		t.Fatalf("delete, create, setData: %d children, want 2", res[2].Stat.NumChildren)
	}
}

// What the hook puts under the object just before the fast multi (after
// the read), on another session, and what the request must then get. The
// request's own kind varies: background behind a foreground waiter,
// shared behind an exclusive one, exclusive behind a shared one, and the
// passes the protocol allows (foreground past a background waiter, shared
// past a shared one).
func TestReviewFastAloneArrivalBeforeMulti(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) { o.AuditInterval = -1 })
	e2 := newEngine(t, zkServer.Servers(), root, native)
	other := rawConn(t, zkServer.Servers())
	acl := zk.WorldACL(zk.PermAll)
	const (
		granted = iota
		waits   // never granted while the child is there
		foreign // ErrForeignNode naming the child
	)
	for _, c := range []struct {
		name   string
		typ    lock.Type
		shared bool
		child  string
		flags  int32
		want   int
	}{
		{"bg-behind-fg", lock.Background, false, "A_x_byhand_", zk.FlagEphemeralSequential, waits},
		{"bg-behind-bg", lock.Background, false, "B_x_byhand_", zk.FlagEphemeralSequential, waits},
		{"shared-behind-x", lock.Foreground, true, "A_x_byhand_", zk.FlagEphemeralSequential, waits},
		{"bgshared-behind-fgx", lock.Background, true, "A_x_byhand_", zk.FlagEphemeralSequential, waits},
		{"x-behind-shared", lock.Foreground, false, "A_s_byhand_", zk.FlagEphemeralSequential, waits},
		{"fg-past-bg", lock.Foreground, false, "B_x_byhand_", zk.FlagEphemeralSequential, granted},
		{"shared-past-shared", lock.Foreground, true, "A_s_byhand_", zk.FlagEphemeralSequential, granted},
		{"fgshared-past-bgx", lock.Foreground, true, "B_x_byhand_", zk.FlagEphemeralSequential, granted},
		{"stray", lock.Foreground, false, "stray", 0, foreign},
		{"stray-ephemeral", lock.Background, true, "zz", zk.FlagEphemeral, foreign},
		{"plugin-bg", lock.Background, false, "A-", zk.FlagEphemeralSequential, foreign},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj := "arr-" + c.name
			faPrime(t, e2, obj)
			var made string
			ran, undo := faHook(t, obj, func(objPath string) {
				p, err := other.Create(objPath+"/"+c.child, nil, c.flags, acl)
				if err != nil {
					t.Error(err)
				}
				made = p
			})
			g, err := e.Acquire(context.Background(), obj, c.typ, lock.AcquireOptions{Shared: c.shared, Wait: 1500 * time.Millisecond})
			undo()
			if !ran() {
				t.Fatal("the hook did not run: the acquire did not take the fast path after a read")
			}
			switch c.want {
			case granted:
				if err != nil {
					t.Fatalf("not granted past %s (the protocol allows it): %v", made, err)
				}
				if g.Shared() != c.shared {
					t.Fatalf("granted shared=%v, want %v", g.Shared(), c.shared)
				}
				release(t, g)
			case waits:
				if err == nil {
					release(t, g)
					t.Fatalf("granted (token %d) past the waiter %s queued before us", g.Token(), made)
				}
				if _, ok := errors.AsType[*lock.InstanceLockError](err); !ok {
					t.Fatalf("acquire behind a waiter that never takes: %v; want a timeout", err)
				}
			case foreign:
				if err == nil {
					release(t, g)
					t.Fatalf("granted (token %d) beside %s", g.Token(), made)
				}
				if !errors.Is(err, lock.ErrForeignNode) || !strings.Contains(err.Error(), path.Base(made)) {
					t.Fatalf("acquire beside %s: %v; want ErrForeignNode naming it", made, err)
				}
			}
			// nothing of ours left; with the child gone the object is free
			faGiveBackThenRemove(t, other, root+"/"+obj, made)
			release(t, acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{}))
			release(t, acquire(t, e2, obj, lock.Background, lock.AcquireOptions{}))
		})
	}
}

// An operator deletes the sentinel just before the multi and a plugin
// participant moves in: its node (A-…) or its ephemeral privateLock. The
// multi's answer would then count two children, ours and the plugin's:
// only the multi's check of the sentinel's mark keeps the count from
// reading as "the sentinel and ours". Never a grant.
func TestReviewFastAloneSentinelSwapped(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) { o.AuditInterval = -1 })
	e2 := newEngine(t, zkServer.Servers(), root, native)
	other := rawConn(t, zkServer.Servers())
	acl := zk.WorldACL(zk.PermAll)
	for _, c := range []struct {
		name  string
		child string // made by the plugin after the sentinel went
		flags int32
	}{
		{"plugin-node", "A-", zk.FlagEphemeralSequential},
		{"plugin-holder", "privateLock", zk.FlagEphemeral},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj := "swap-" + c.name
			faPrime(t, e2, obj)
			var made string
			ran, undo := faHook(t, obj, func(objPath string) {
				for _, p := range []string{objPath + "/privateLock/native", objPath + "/privateLock"} {
					if err := other.Delete(p, -1); err != nil {
						t.Error(err)
					}
				}
				p, err := other.Create(objPath+"/"+c.child, []byte("plugin"), c.flags, acl)
				if err != nil {
					t.Error(err)
				}
				made = p
			})
			g, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: 1500 * time.Millisecond})
			undo()
			if !ran() {
				t.Fatal("the hook did not run")
			}
			if err == nil {
				release(t, g)
				t.Fatalf("granted (token %d) with the sentinel replaced by %s", g.Token(), made)
			}
			if !errors.Is(err, lock.ErrForeignNode) {
				t.Logf("refused: %v", err) // a wait that timed out is no grant either
			}
			// the plugin leaves: the object is Baton's again (a sentinel
			// made anew)
			faGiveBackThenRemove(t, other, root+"/"+obj, made)
			release(t, acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{}))
			release(t, acquire(t, e2, obj, lock.Foreground, lock.AcquireOptions{}))
		})
	}
}

// An operator's deleteall and recreate of the object node (with a
// sentinel, its data written up to the version our read saw) just before
// the multi: the multi lands on the new node, its answer counts two
// children, but the node is not the one read (czxid): given back, then
// queued and granted on the new node, nothing left behind. Then the same
// with a waiter of another engine on the new node (count three).
func TestReviewFastAloneRecreatedObject(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) { o.AuditInterval = -1 })
	e2 := newEngine(t, zkServer.Servers(), root, native)
	other := rawConn(t, zkServer.Servers())
	acl := zk.WorldACL(zk.PermAll)
	recreate := func(t *testing.T, objPath string) {
		_, st, err := other.Get(objPath)
		if err != nil {
			t.Error(err)
			return
		}
		if err := faDeleteAll(other, objPath); err != nil {
			t.Error(err)
			return
		}
		free := []byte(`{"native":1}`)
		if _, err := other.Multi(
			&zk.CreateRequest{Path: objPath, Data: free, Acl: acl},
			&zk.CreateRequest{Path: objPath + "/privateLock", Data: free, Acl: acl},
			&zk.CreateRequest{Path: objPath + "/privateLock/native", Acl: acl},
		); err != nil {
			t.Error(err)
			return
		}
		for v := int32(0); v < st.Version; v++ {
			if _, err := other.Set(objPath, free, v); err != nil {
				t.Error(err)
				return
			}
		}
	}
	for _, withWaiter := range []bool{false, true} {
		t.Run(fmt.Sprint("waiter=", withWaiter), func(t *testing.T) {
			obj := fmt.Sprint("renew-", withWaiter)
			objPath := root + "/" + obj
			faPrime(t, e2, obj)
			waiterToken := make(chan int64, 1)
			waiterDone := make(chan error, 1)
			ran, undo := faHook(t, obj, func(objPath string) {
				recreate(t, objPath)
				if !withWaiter {
					return
				}
				// a waiter of e2 on the new node, queued (its child made)
				// before our multi (a lock-delay: no fast path of its
				// own), holding a moment once granted
				go func() {
					g, err := e2.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{LockDelay: time.Second})
					if err != nil {
						waiterDone <- err
						return
					}
					waiterToken <- g.Token()
					time.Sleep(100 * time.Millisecond)
					waiterDone <- g.Release(context.Background())
				}()
				if !waitUntil(10*time.Second, func() bool {
					kids, _, _ := other.Children(objPath)
					return len(kids) >= 2
				}) {
					t.Error("e2's waiter made no child")
				}
			})
			g, err := e.Acquire(context.Background(), obj, lock.Background, lock.AcquireOptions{Wait: 30 * time.Second})
			undo()
			if !ran() {
				t.Fatal("the hook did not run")
			}
			if withWaiter {
				if werr := <-waiterDone; werr != nil {
					t.Fatalf("e2's waiter: %v", werr)
				}
			}
			if err != nil {
				t.Fatalf("acquire on the recreated object: %v", err)
			}
			if withWaiter {
				// e2's waiter queued first, and is foreground: it holds
				// before us (ZooKeeper's order: the tokens)
				if wt := <-waiterToken; wt >= g.Token() {
					t.Fatalf("granted (token %d) before the waiter queued ahead (token %d)", g.Token(), wt)
				}
			}
			if kids := faKids(t, other, objPath); len(kids) != 1 || kids[0] != g.Node() {
				t.Fatalf("children while held: %v, want only %s", kids, g.Node())
			}
			release(t, g)
			release(t, acquire(t, e2, obj, lock.Foreground, lock.AcquireOptions{}))
		})
	}
}

// A real request of another engine queues (its child made, its take not
// yet landed or landed) just before our fast multi: whichever of its take
// and our multi lands first, it is granted before us when it sorts ahead
// (foreground, or background with an older child), and the tokens say so.
// A lock-delay sends it through the queue (child, view, take) rather than
// a fast multi of its own, and a slow connection (100 ms each way) has its
// take land after our multi as a rule: our multi counts three children.
func TestReviewFastAloneRacingEngine(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) { o.AuditInterval = -1 })
	p := testenv.ProxyT(t, zkServer.Addr(1))
	e2 := newEngine(t, []string{p.Addr()}, root, native)
	p.SetLatency(100 * time.Millisecond)
	e3 := newEngine(t, zkServer.Servers(), root, native)
	other := rawConn(t, zkServer.Servers())
	for i := range 6 {
		ours, theirs := lock.Foreground, lock.Foreground
		if i%2 == 1 {
			ours = lock.Background
		}
		if i%3 == 2 {
			ours, theirs = lock.Background, lock.Background
		}
		t.Run(fmt.Sprint(i, "-", ours, "-behind-", theirs), func(t *testing.T) {
			obj := fmt.Sprint("race-", i)
			objPath := root + "/" + obj
			faPrime(t, e3, obj)
			type res struct {
				token int64
				err   error
			}
			theirDone := make(chan res, 1)
			ran, undo := faHook(t, obj, func(string) {
				go func() {
					g, err := e2.Acquire(context.Background(), obj, theirs, lock.AcquireOptions{LockDelay: time.Second, Wait: 30 * time.Second})
					if err != nil {
						theirDone <- res{err: err}
						return
					}
					time.Sleep(20 * time.Millisecond)
					theirDone <- res{g.Token(), g.Release(context.Background())}
				}()
				if !waitUntil(10*time.Second, func() bool {
					kids, _, _ := other.Children(objPath)
					return len(kids) >= 2
				}) {
					t.Error("e2's request made no child")
				}
			})
			g, err := e.Acquire(context.Background(), obj, ours, lock.AcquireOptions{Wait: 30 * time.Second})
			undo()
			if !ran() {
				t.Fatal("the hook did not run")
			}
			if err != nil {
				t.Fatal(err)
			}
			tok := g.Token()
			release(t, g)
			r := <-theirDone
			if r.err != nil {
				t.Fatalf("e2: %v", r.err)
			}
			if r.token >= tok {
				t.Fatalf("granted (token %d) past e2's %v request queued before our multi (token %d)", tok, theirs, r.token)
			}
		})
	}
}

// The engine's connection is lost with the fast multi in flight (the
// multi lands, its answer does not come back): the request gives back
// what landed after the reconnect, queues, and is granted; another engine
// contending meanwhile never overlaps with it, and tokens rise.
func TestReviewFastAloneConnLossInFlight(t *testing.T) {
	root := testRoot(t, zkServer)
	p := testenv.ProxyT(t, zkServer.Addr(1))
	e := newEngine(t, []string{p.Addr()}, root, native, func(o *lock.Options) { o.AuditInterval = -1; o.SessionTimeout = 6 * time.Second })
	e2 := newEngine(t, zkServer.Servers(), root, native)
	other := rawConn(t, zkServer.Servers())
	obj := "cut"
	objPath := root + "/" + obj
	faPrime(t, e2, obj)
	var chk overlapChecker
	ran, undo := faHook(t, obj, func(string) { p.BlackHoleDownstream() })
	healed := make(chan struct{})
	go func() {
		defer close(healed)
		// our multi landed (data names us, our child is there)
		waitUntil(10*time.Second, func() bool {
			kids, _, _ := other.Children(objPath)
			return len(kids) == 2
		})
		time.Sleep(100 * time.Millisecond)
		p.Heal()
		p.ResetConnections()
	}()
	theirs := make(chan error, 1)
	go func() {
		<-healed
		g, err := e2.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
		if err == nil {
			chk.enter(g.Token())
			time.Sleep(20 * time.Millisecond)
			chk.leave()
			err = g.Release(context.Background())
		}
		theirs <- err
	}()
	g, err := e.Acquire(context.Background(), obj, lock.Background, lock.AcquireOptions{Wait: 30 * time.Second})
	undo()
	<-healed
	if !ran() {
		t.Fatal("the hook did not run")
	}
	if err != nil {
		t.Fatalf("acquire after the lost answer: %v", err)
	}
	chk.enter(g.Token())
	if kids := faKids(t, other, objPath); len(kids) != 1 || kids[0] != g.Node() {
		t.Errorf("children while held: %v, want only %s (an orphan of the lost multi?)", kids, g.Node())
	}
	time.Sleep(20 * time.Millisecond)
	chk.leave()
	release(t, g)
	if err := <-theirs; err != nil {
		t.Fatal(err)
	}
	chk.verify(t, 2)
}

// The prediction a fast-alone grant leaves (seq+1, when this engine had no
// other request on the object) is made without a listing: a child that
// came after the multi is unknown to it. A wrong prediction must cost a
// listing, never a grant past a waiter; a right one (nobody created
// since) is a hit on the next acquire.
func TestReviewFastAlonePredictionAfterArrival(t *testing.T) {
	root := testRoot(t, zkServer)
	obs := &countObserver{}
	e := newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) {
		o.AuditInterval = -1
		o.HolderWatchDelay = time.Hour // no learning while held: the release names nobody
		o.Observer = obs
	})
	e2 := newEngine(t, zkServer.Servers(), root, native)
	other := rawConn(t, zkServer.Servers())
	acl := zk.WorldACL(zk.PermAll)
	ctx := context.Background()

	t.Run("waiter-after-multi", func(t *testing.T) {
		obj := "pred-waiter"
		objPath := root + "/" + obj
		faPrime(t, e2, obj)
		ran, undo := faHook(t, obj, func(string) {})
		g := acquire(t, e, obj, lock.Background, lock.AcquireOptions{})
		undo()
		if !ran() {
			t.Fatal("the first acquire did not take the fast path after a read")
		}
		// a foreground waiter of another engine (by hand: it never
		// takes), queued after our multi: the grant did not see it
		w, err := other.Create(objPath+"/A_x_byhand_", nil, zk.FlagEphemeralSequential, acl)
		if err != nil {
			t.Fatal(err)
		}
		release(t, g)
		hits, misses := obs.hits.Load(), obs.misses.Load()
		ran, undo = faHook(t, obj, func(string) {})
		g2, err := e.Acquire(ctx, obj, lock.Background, lock.AcquireOptions{Wait: 1500 * time.Millisecond})
		undo()
		if err == nil {
			release(t, g2)
			t.Fatalf("granted (token %d) past the waiter %s on a prediction", g2.Token(), w)
		}
		if _, ok := errors.AsType[*lock.InstanceLockError](err); !ok {
			t.Fatalf("acquire behind a waiter that never takes: %v; want a timeout", err)
		}
		if !ran() || obs.hits.Load() != hits || obs.misses.Load() != misses+1 {
			t.Errorf("the second acquire: fast=%v, %d hits %d misses; want the predicted multi, refused by its sequence number (0, 1)",
				ran(), obs.hits.Load()-hits, obs.misses.Load()-misses)
		}
		waitFor(t, 10*time.Second, "our child given back", func() bool { return len(faKids(t, other, objPath)) == 1 })
		if err := other.Delete(w, -1); err != nil {
			t.Fatal(err)
		}
		release(t, acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{}))
	})

	t.Run("child-came-and-went", func(t *testing.T) {
		obj := "pred-went"
		objPath := root + "/" + obj
		faPrime(t, e2, obj)
		g := acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
		// a child made and gone after our multi: the prediction is wrong
		// (the sequence moved), nobody waits
		w, err := other.Create(objPath+"/A_x_byhand_", nil, zk.FlagEphemeralSequential, acl)
		if err != nil {
			t.Fatal(err)
		}
		if err := other.Delete(w, -1); err != nil {
			t.Fatal(err)
		}
		release(t, g)
		hits, misses := obs.hits.Load(), obs.misses.Load()
		g = acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{Wait: 10 * time.Second})
		if obs.hits.Load() != hits || obs.misses.Load() != misses+1 {
			t.Errorf("after a child came and went: %d hits %d misses, want 0 1", obs.hits.Load()-hits, obs.misses.Load()-misses)
		}
		release(t, g)
		// that grant (alone, no listing) predicted right
		g = acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
		if obs.hits.Load() != hits+1 || obs.misses.Load() != misses+1 {
			t.Errorf("next acquire: %d hits %d misses, want 1 1 (the fast-alone grant's prediction)", obs.hits.Load()-hits, obs.misses.Load()-misses)
		}
		release(t, g)
	})
}

// A waiter with a lock-delay waits out a holder that vanished (Abandon:
// "x" recorded), its child made. A request without one that reads the
// object then (no holder named) takes the fast multi: it counts the
// waiter's child and must queue behind it, not pass it.
func TestReviewFastAloneLockDelayWaiter(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) { o.AuditInterval = -1 })
	e1 := newEngine(t, zkServer.Servers(), root, native)
	e2 := newEngine(t, zkServer.Servers(), root, native)
	other := rawConn(t, zkServer.Servers())
	obj := "delay"
	objPath := root + "/" + obj
	g1 := acquire(t, e1, obj, lock.Foreground, lock.AcquireOptions{})
	if err := g1.Abandon(context.Background()); err != nil {
		t.Fatal(err)
	}
	type res struct {
		token int64
		at    time.Time
		err   error
	}
	wdone := make(chan res, 1)
	go func() {
		g, err := e2.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{LockDelay: 2 * time.Second, Wait: 30 * time.Second})
		if err != nil {
			wdone <- res{err: err}
			return
		}
		at := time.Now()
		wdone <- res{g.Token(), at, g.Release(context.Background())}
	}()
	waitFor(t, 10*time.Second, "the lock-delay waiter's child", func() bool { return len(faKids(t, other, objPath)) == 1 })
	ran, undo := faHook(t, obj, func(string) {})
	g, err := e.Acquire(context.Background(), obj, lock.Background, lock.AcquireOptions{Wait: 30 * time.Second})
	undo()
	at := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	release(t, g)
	w := <-wdone
	if w.err != nil {
		t.Fatalf("lock-delay waiter: %v", w.err)
	}
	if !ran() {
		t.Error("the acquire did not take the fast path after a read")
	}
	if w.token >= g.Token() || at.Before(w.at) {
		t.Fatalf("granted (token %d) past the lock-delay waiter queued ahead (token %d)", g.Token(), w.token)
	}
}

// faRW checks one object's grants: an exclusive grant alone, a shared one
// beside shared ones only; an exclusive grant's token above every token
// seen before it, a shared one's above every exclusive one.
type faRW struct {
	mu                 sync.Mutex
	writers, readers   int
	maxAll, maxX       int64
	overlaps, badToken int
}

func (c *faRW) enter(g *lock.Grant) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tok := g.Token()
	if g.Shared() {
		c.readers++
		if c.writers != 0 {
			c.overlaps++
		}
		if tok <= c.maxX {
			c.badToken++
		}
		c.maxAll = max(c.maxAll, tok)
		return
	}
	c.writers++
	if c.writers != 1 || c.readers != 0 {
		c.overlaps++
	}
	if tok <= c.maxAll {
		c.badToken++
	}
	c.maxAll, c.maxX = max(c.maxAll, tok), tok
}

func (c *faRW) leave(g *lock.Grant) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g.Shared() {
		c.readers--
	} else {
		c.writers--
	}
}

// Engines (parking on and off) race on fresh objects (first touches) and
// take hot objects by turns and together, foreground and background,
// exclusive and shared: no overlap, rising tokens, every request granted;
// the fast-alone path is taken along the way.
func TestReviewFastAloneStress(t *testing.T) {
	root := testRoot(t, zkServer)
	var es []*lock.Engine
	for i := range 3 {
		es = append(es, newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) {
			o.AuditInterval = -1
			o.DisableParking = i == 1
		}))
	}
	var fast atomic.Int64
	undo := lock.SetFastMultiHook(func(string) { fast.Add(1) })
	defer undo()
	var mu sync.Mutex
	checks := map[string]*faRW{}
	check := func(obj string) *faRW {
		mu.Lock()
		defer mu.Unlock()
		if checks[obj] == nil {
			checks[obj] = &faRW{}
		}
		return checks[obj]
	}
	var failed atomic.Int64
	turn := func(e *lock.Engine, obj string, typ lock.Type, shared bool, hold time.Duration) {
		g, err := e.Acquire(context.Background(), obj, typ, lock.AcquireOptions{Shared: shared, Wait: 30 * time.Second})
		if err != nil {
			failed.Add(1)
			t.Errorf("%s %v shared=%v: %v", obj, typ, shared, err)
			return
		}
		c := check(obj)
		c.enter(g)
		time.Sleep(hold)
		c.leave(g)
		if err := g.Release(context.Background()); err != nil {
			t.Errorf("release %s: %v", obj, err)
		}
	}
	// fresh objects: every engine's two workers at once
	for k := range 8 {
		obj := fmt.Sprint("fresh-", k)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, e := range es {
			for j := range 2 {
				wg.Go(func() {
					<-start
					typ := lock.Foreground
					if (i+j+k)%3 == 0 {
						typ = lock.Background
					}
					turn(e, obj, typ, (i+k)%4 == 1, time.Millisecond)
				})
			}
		}
		close(start)
		wg.Wait()
	}
	// hot objects: turns and contention
	var wg sync.WaitGroup
	for i, e := range es {
		for j := range 3 {
			wg.Go(func() {
				for n := range 25 {
					x := i*7 + j*3 + n
					obj := fmt.Sprint("hot-", x%3)
					typ := lock.Foreground
					if x%4 == 0 {
						typ = lock.Background
					}
					turn(e, obj, typ, x%3 == 1, time.Duration(x%3)*time.Millisecond)
					if n%5 == 4 {
						time.Sleep(5 * time.Millisecond) // let an object fall free: turns
					}
				}
			})
		}
	}
	wg.Wait()
	for obj, c := range checks {
		if c.overlaps != 0 || c.badToken != 0 {
			t.Errorf("%s: overlaps=%d non-increasing tokens=%d", obj, c.overlaps, c.badToken)
		}
	}
	if fast.Load() == 0 {
		t.Error("no fast multi was sent")
	}
	t.Logf("fast multis %d, failures %d", fast.Load(), failed.Load())
}

// A fast-alone grant (no listing) hosts requests of its engine parked
// behind it; a request of another engine queues after the grant. The
// release grants the first parked request in its multi (passing the
// other engine's waiter once, as the package doc allows), and that grant
// finds the waiter (its multi counted three children): the waiter comes
// before the second parked request.
func TestReviewFastAloneParkedBehindFastGrant(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, native, parking, func(o *lock.Options) { o.AuditInterval = -1 })
	e2 := newEngine(t, zkServer.Servers(), root, native)
	other := rawConn(t, zkServer.Servers())
	obj := "parked"
	objPath := root + "/" + obj
	faPrime(t, e2, obj)
	ran, undo := faHook(t, obj, func(string) {})
	g1 := acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
	undo()
	if !ran() {
		t.Fatal("the first acquire did not take the fast path after a read")
	}
	type res struct {
		who   string
		token int64
		err   error
	}
	out := make(chan res, 3)
	take := func(who string, e *lock.Engine) {
		g, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
		if err != nil {
			out <- res{who, 0, err}
			return
		}
		time.Sleep(20 * time.Millisecond)
		out <- res{who, g.Token(), g.Release(context.Background())}
	}
	parks := e.Parks()
	go take("parked1", e)
	waitFor(t, 10*time.Second, "the first request parked", func() bool { return e.Parks() == parks+1 })
	go take("parked2", e)
	waitFor(t, 10*time.Second, "the second request parked", func() bool { return e.Parks() == parks+2 })
	go take("remote", e2)
	waitFor(t, 10*time.Second, "the remote waiter's child", func() bool { return len(faKids(t, other, objPath)) == 2 })
	release(t, g1)
	tokens := map[string]int64{}
	for range 3 {
		r := <-out
		if r.err != nil {
			t.Fatalf("%s: %v", r.who, r.err)
		}
		tokens[r.who] = r.token
	}
	if tokens["remote"] > tokens["parked2"] {
		t.Fatalf("the remote waiter was passed by two parked requests: tokens %v", tokens)
	}
	t.Logf("tokens %v", tokens)
}

// faGiveBackThenRemove waits until made (a node put there by hand) is the
// object's only child but the sentinel (the refused acquire gave its own
// back), then deletes it.
func faGiveBackThenRemove(t *testing.T, conn *zk.Conn, objPath, made string) {
	t.Helper()
	waitFor(t, 10*time.Second, "our child given back", func() bool {
		for _, k := range faKids(t, conn, objPath) {
			if objPath+"/"+k != made {
				return false
			}
		}
		return true
	})
	if err := conn.Delete(made, -1); err != nil {
		t.Fatal(err)
	}
}
