package lock_test

// Independent review of 97d214e: a native first touch (the read found no
// object node) is one multi that creates the object node with free data,
// its sentinel and the sentinel's mark, our child, and names us guarded by
// data version 0. A node made meanwhile (NodeExists) or no lock root
// (NoNode): nothing is created and the two-write path follows; an answer
// lost: given back. Interleavings are forced by the fast-multi hook (it
// runs just before the multi is sent) or a dialer gate on the engine's
// connection; the tests check order and counts, never timings.

import (
	"context"
	"encoding/json"
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

// foHolders returns the request ids the object's data names as holders.
func foHolders(t *testing.T, conn *zk.Conn, objPath string) []string {
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
	if len(b) > 0 {
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("data of %s: %v (%q)", objPath, err, b)
		}
	}
	var out []string
	for _, h := range d.H {
		out = append(out, h.R)
	}
	return out
}

// foBarrier is a fast-multi hook for objects whose name starts with
// prefix: the first k fast multis on each such object are held until all k
// have come (or 3 s have passed), then sent together; later ones pass.
// Every request on a new object that read "no node" is held just before
// its first-touch multi: they race for the object node. full counts the
// objects on which k multis were held at once.
type foBarrier struct {
	prefix string
	k      int
	mu     sync.Mutex
	n      map[string]int
	ch     map[string]chan struct{}
	full   atomic.Int32
}

func (b *foBarrier) hook(objPath string) {
	name := path.Base(objPath)
	if !strings.HasPrefix(name, b.prefix) {
		return
	}
	b.mu.Lock()
	b.n[name]++
	n := b.n[name]
	if n > b.k {
		b.mu.Unlock()
		return
	}
	ch := b.ch[name]
	if ch == nil {
		ch = make(chan struct{})
		b.ch[name] = ch
	}
	if n == b.k {
		close(ch)
		b.full.Add(1)
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	t := time.NewTimer(3 * time.Second)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// Three engines (one parking its local waiters) stampede new objects: on
// each, six requests at once (exclusive and shared, foreground and
// background, one with a lock-delay), their first-touch multis held and
// sent together so that several race for the object node; then a second
// round on the same objects (predictions the first-touch grants left, and
// refused ones). Exclusive holders are alone, shared ones only with shared
// ones, exclusive tokens increase, every request is granted, nothing is
// left. A multi that lost the race (NodeExists) must create nothing and
// grant nothing.
func TestReviewFirstOneStampede(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	s := zkServer.Servers()
	foStampede(t, conn, root, [][]string{s, s, s})
}

// The same on a three-node ensemble, each engine on a node of its own (two
// of them followers: the read finding no node may be a follower's, the
// multi's answer is made where the session is).
func TestReviewFirstOneStampedeEnsemble(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own ZooKeeper ensemble")
	}
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{Nodes: 3})
	conn := rawConn(t, z.Servers())
	root := "/t/review_firstone_ensemble"
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })
	foStampede(t, conn, root, [][]string{{z.Addr(1)}, {z.Addr(2)}, {z.Addr(3)}})
}

// foStampede runs TestReviewFirstOneStampede's rounds with an engine on
// each of servers.
func foStampede(t *testing.T, conn *zk.Conn, root string, servers [][]string) {
	es := []*lock.Engine{
		newEngine(t, servers[0], root, native, noAudit),
		newEngine(t, servers[1], root, native, noAudit, parking),
		newEngine(t, servers[2], root, native, noAudit),
	}
	for _, e := range es { // the root exists (its creation is not the race under test)
		release(t, acquire(t, e, "warm", lock.Foreground, lock.AcquireOptions{}))
	}
	bar := &foBarrier{prefix: "st-", k: 3, n: map[string]int{}, ch: map[string]chan struct{}{}}
	undo := lock.SetFastMultiHook(bar.hook)
	defer undo()
	const objects, perEngine = 6, 2
	chks := make([]rwChecker, objects)
	for round := range 2 {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for o := range objects {
			obj := fmt.Sprintf("st-%d", o)
			for i, e := range es {
				for j := range perEngine {
					k := (i*perEngine + j + o + round) % 6
					typ := lock.Foreground
					if k == 1 || k == 4 {
						typ = lock.Background
					}
					opts := lock.AcquireOptions{Wait: 30 * time.Second, Shared: k == 2 || k == 3}
					if k == 5 {
						opts.LockDelay = 300 * time.Millisecond
					}
					wg.Go(func() {
						<-start
						g, err := e.Acquire(context.Background(), obj, typ, opts)
						if err != nil {
							t.Errorf("round %d %s on engine %d (%d): %v", round, obj, i, k, err)
							return
						}
						chks[o].enter(opts.Shared, g.Token())
						time.Sleep(2 * time.Millisecond) // a holder that stays a moment: not a condition of the test
						chks[o].leave(opts.Shared)
						if err := g.Release(context.Background()); err != nil {
							t.Errorf("release %s: %v", obj, err)
						}
					})
				}
			}
		}
		close(start)
		wg.Wait()
	}
	for o := range chks {
		c := &chks[o]
		if want := 2 * len(es) * perEngine; c.violations != 0 || c.badToken != 0 || c.grants != want {
			t.Errorf("object st-%d: %d violations, %d exclusive tokens not increasing, %d grants (want %d)", o, c.violations, c.badToken, c.grants, want)
		}
		if k := children(t, conn, root, fmt.Sprintf("st-%d", o)); len(k) != 1 || k[0] != "privateLock" {
			t.Errorf("object st-%d left %v; want the sentinel only", o, k)
		}
	}
	if bar.full.Load() == 0 {
		t.Errorf("no object saw %d fast multis held at once: the race under test never happened", bar.k)
	}
	t.Logf("%d of %d objects raced by %d first-touch multis at once", bar.full.Load(), objects, bar.k)
}

// A context cancelled, or the wait timing out, while the first-touch multi
// is queued to be sent: the acquire fails with the context's error, the
// multi is then applied (the object node, its sentinel, our child, our
// name). What landed is given back (the session's cleanup from the late
// answer): the object ends free, with the sentinel only; another engine's
// request with a lock-delay is granted without one (nobody vanished), and
// the first engine takes the object again afterwards. With "-cut" the
// connection is cut too once the multi is written (its answer lost).
func TestReviewFirstOneCancelInFlight(t *testing.T) {
	for _, how := range []string{"cancel", "timeout", "cancel-cut"} {
		t.Run(how, func(t *testing.T) {
			root := testRoot(t, zkServer)
			conn := rawConn(t, zkServer.Servers())
			gate := &stepDialer{}
			eA := newEngine(t, zkServer.Servers(), root, native, noAudit, func(o *lock.Options) { o.Dialer = gate.dial })
			eC := newEngine(t, zkServer.Servers(), root, native, noAudit)
			release(t, acquire(t, eA, "warm", lock.Foreground, lock.AcquireOptions{}))
			var obj, objPath string
			var r asyncResult
			for attempt := 0; ; attempt++ {
				// The reply cannot come before the write the gate holds:
				// the wait ends first unless the acquiring goroutine was not
				// scheduled for the whole pause (then: granted, again).
				obj = fmt.Sprint("cf-", how, "-", attempt, "-", time.Now().UnixNano())
				objPath = root + "/" + obj
				ctx, cancel := context.WithCancel(context.Background())
				wait := 30 * time.Second
				if how == "timeout" {
					wait = 500 * time.Millisecond
				}
				fired := gate.once(isObjectCreate(objPath), func() bool {
					if how != "timeout" {
						cancel()
					}
					time.Sleep(800 * time.Millisecond) // past the wait's end (a cancel: at once; a timeout: 500 ms), well within the connection's receive timeout
					return how == "cancel-cut"
				})
				ach := grantAsync(ctx, eA, obj, lock.Foreground, lock.AcquireOptions{Wait: wait, RequestID: "rqA"})
				waitClosed(t, fired, "the first-touch multi")
				select {
				case r = <-ach:
				case <-time.After(30 * time.Second):
					t.Fatal("the acquire never returned")
				}
				cancel()
				if r.err == nil {
					release(t, r.g)
					if attempt < 3 {
						t.Logf("attempt %d granted (the answer beat the wait's end): again", attempt)
						continue
					}
					t.Fatal("the wait never ended before the answer")
				}
				break
			}
			if !errors.Is(r.err, context.Canceled) && !errors.Is(r.err, context.DeadlineExceeded) {
				t.Fatalf("acquire: %v; want the context's error", r.err)
			}
			// the multi landed: our child and our name, given back
			if !waitUntil(20*time.Second, func() bool {
				ok, _, err := conn.Exists(objPath + "/privateLock/native")
				return err == nil && ok
			}) {
				t.Fatal("setup: the first-touch multi never landed")
			}
			if !waitUntil(20*time.Second, func() bool {
				k, _, err := conn.Children(objPath)
				return err == nil && len(k) == 1 && len(foHolders(t, conn, objPath)) == 0
			}) {
				k, _, _ := conn.Children(objPath)
				t.Fatalf("what the cancelled first touch made was not given back: children %v, holders %v", k, foHolders(t, conn, objPath))
			}
			c := acquire(t, eC, obj, lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second, LockDelay: time.Minute})
			if d := eC.Health().LockDelays; d != 0 {
				t.Errorf("%d lock-delays after a cancelled first touch (nobody held)", d)
			}
			release(t, c)
			a := acquire(t, eA, obj, lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
			if a.Token() <= c.Token() {
				t.Errorf("token %d after %d", a.Token(), c.Token())
			}
			release(t, a)
		})
	}
}

// The first-touch multi is lost with the connection: applied with its
// answer lost ("applied"), or never sent ("dropped"), while another
// engine's request with a lock-delay comes for the object. Both are
// granted, one at a time, tokens increasing, with no lock-delay (nobody
// vanished), and nothing is left: the request gives back what landed
// (uncertain) and queues; when nothing landed it makes the object itself.
func TestReviewFirstOneCutAppliedOrNot(t *testing.T) {
	for _, how := range []string{"applied", "dropped"} {
		t.Run(how, func(t *testing.T) {
			foCut(t, zkServer.Servers(), testRoot(t, zkServer), how, true)
		})
	}
}

// The same on a three-node ensemble: the engine reconnects to another
// node after the cut (a multi sent to the node it left lands before the
// give-back's sync there, or never). Whether the cut multi landed is not
// forced (a follower forwards it to the leader): either way, one at a
// time, no lock-delay, nothing left.
func TestReviewFirstOneCutEnsemble(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own ZooKeeper ensemble")
	}
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{Nodes: 3})
	for i := range 4 {
		t.Run(fmt.Sprint("cut", i), func(t *testing.T) {
			root := fmt.Sprint("/t/review_firstone_cut_ensemble", i)
			conn := rawConn(t, z.Servers())
			t.Cleanup(func() { assertNoLeftovers(t, conn, root) })
			foCut(t, z.Servers(), root, "applied", false)
		})
	}
}

// foCut is TestReviewFirstOneCutAppliedOrNot on servers under root;
// landed: the cut multi must have landed ("applied").
func foCut(t *testing.T, servers []string, root, how string, landed bool) {
	t.Helper()
	conn := rawConn(t, servers)
	gate := &stepDialer{}
	eA := newEngine(t, servers, root, native, noAudit, func(o *lock.Options) { o.Dialer = gate.dial })
	eC := newEngine(t, servers, root, native, noAudit)
	release(t, acquire(t, eA, "warm", lock.Foreground, lock.AcquireOptions{}))
	obj := fmt.Sprint("ca-", how, "-", time.Now().UnixNano())
	objPath := root + "/" + obj
	var cut <-chan struct{}
	if how == "applied" {
		cut = gate.once(isObjectCreate(objPath), func() bool { return true })
	} else {
		cut = gate.onceDrop(isObjectCreate(objPath))
	}
	bg := context.Background()
	ach := grantAsync(bg, eA, obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, RequestID: "rqA"})
	waitClosed(t, cut, "the cut of the first-touch multi")
	if how == "applied" {
		ok := waitUntil(map[bool]time.Duration{true: 10 * time.Second, false: 2 * time.Second}[landed], func() bool {
			_, st, err := conn.Get(objPath)
			return err == nil && st.NumChildren == 2
		})
		switch {
		case !ok && landed:
			t.Fatal("setup: the one multi did not land")
		case !landed:
			t.Logf("the cut multi landed: %v", ok)
		}
	}
	cch := grantAsync(bg, eC, obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, LockDelay: time.Minute})
	takeBothNoDelay(t, &overlapChecker{}, eC, ach, cch)
	// On an ensemble conn may read from a follower that has not applied
	// the releases yet (seen once under make test's load): sync it first,
	// so the check reads the state as of both releases.
	if _, err := conn.Sync(objPath); err != nil {
		t.Fatalf("sync %s: %v", objPath, err)
	}
	if k := faKids(t, conn, objPath); len(k) != 0 {
		t.Errorf("left %v", k)
	}
	if h := foHolders(t, conn, objPath); len(h) != 0 {
		t.Errorf("the data still names %v", h)
	}
}

// Between the read that found no object node and the first-touch multi,
// the node appears: a plugin holder's (plain object node, ephemeral
// privateLock), a plugin's empty container node, an object restored by an
// operator (or a participant of another build) whose data names a holder
// with a live child, or another engine's shared grant. The multi creates nothing; the request
// fails with ErrForeignNode beside the plugin holder, takes the plugin's
// node (sentinel added, the plugin kept out), queues behind the restored
// holder until its child goes, queues behind the shared holder
// (exclusive) or joins it (shared). Nothing of ours is left.
func TestReviewFirstOneNodeBeforeMulti(t *testing.T) {
	acl := zk.WorldACL(zk.PermAll)
	for _, c := range []string{"plugin-sentinel", "plugin-container", "restored-holder", "shared-holder-exclusive", "shared-holder-shared"} {
		t.Run(c, func(t *testing.T) {
			root := testRoot(t, zkServer)
			conn := rawConn(t, zkServer.Servers())
			pconn := rawConn(t, zkServer.Servers())
			eA := newEngine(t, zkServer.Servers(), root, native, noAudit)
			eB := newEngine(t, zkServer.Servers(), root, native, noAudit)
			release(t, acquire(t, eA, "warm", lock.Foreground, lock.AcquireOptions{}))
			obj := fmt.Sprint("nb-", time.Now().UnixNano())
			objPath := root + "/" + obj
			var bHeld *lock.Grant
			var ghost string
			ran, undo := faHook(t, obj, func(p string) {
				switch c {
				case "plugin-sentinel":
					foPluginHolder(t, pconn, p)
				case "plugin-container":
					if _, err := pconn.CreateContainer(p, nil, zk.FlagContainer, acl); err != nil {
						t.Error(err)
					}
				case "restored-holder":
					if _, err := conn.Multi(
						&zk.CreateRequest{Path: p, Data: []byte(`{"native":1,"h":[{"r":"ghost~000000000000","t":1}]}`), Acl: acl},
						&zk.CreateRequest{Path: p + "/privateLock", Data: []byte(`{"native":1}`), Acl: acl},
						&zk.CreateRequest{Path: p + "/privateLock/native", Acl: acl},
					); err != nil {
						t.Error(err)
					}
					var err error
					if ghost, err = pconn.Create(p+"/A_x_ghost~000000000000_", nil, zk.FlagEphemeralSequential, acl); err != nil {
						t.Error(err)
					}
				default: // B's whole first touch (its own hook call passes: the hook ran once)
					g, err := eB.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Shared: true, Wait: 10 * time.Second})
					if err != nil {
						t.Error(err)
						return
					}
					bHeld = g
				}
			})
			defer undo()
			opts := lock.AcquireOptions{Wait: 30 * time.Second, RequestID: "rqA", Shared: c == "shared-holder-shared"}
			ach := grantAsync(context.Background(), eA, obj, lock.Foreground, opts)
			var r asyncResult
			switch c {
			case "restored-holder":
				waitFor(t, 20*time.Second, "the hook", ran)
				foMustQueue(t, conn, ach, objPath, "the restored holder")
				if err := pconn.Delete(ghost, -1); err != nil {
					t.Fatal(err)
				}
				r = <-ach
			case "shared-holder-exclusive":
				waitFor(t, 20*time.Second, "the hook", ran)
				if bHeld == nil {
					t.Fatal("setup: B was not granted")
				}
				foMustQueue(t, conn, ach, objPath, "B's shared grant")
				release(t, bHeld)
				r = <-ach
			case "shared-holder-shared":
				r = <-ach
				if bHeld == nil {
					t.Fatal("setup: B was not granted")
				}
				if r.err == nil && bHeld.State() != lock.Held {
					t.Errorf("B's shared grant ended (%v) when A joined", bHeld.State())
				}
				release(t, bHeld)
			default:
				r = <-ach
			}
			if !ran() {
				t.Fatal("the hook never ran: no first-touch multi")
			}
			switch c {
			case "plugin-sentinel":
				if !errors.Is(r.err, lock.ErrForeignNode) {
					if r.err == nil {
						_ = r.g.Release(context.Background()) // its error aside: the failure is the grant
					}
					t.Fatalf("beside a plugin holder: %v; want ErrForeignNode", r.err)
				}
				if k := faKids(t, conn, objPath); len(k) != 0 {
					t.Errorf("left %v", k)
				}
				if err := pconn.Delete(objPath+"/privateLock", -1); err != nil { // the plugin releases
					t.Fatal(err)
				}
				return
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			if bHeld != nil && r.g.Token() <= bHeld.Token() && c == "shared-holder-exclusive" {
				t.Errorf("token %d after %d", r.g.Token(), bHeld.Token())
			}
			if ok, _, err := conn.Exists(objPath + "/privateLock/native"); err != nil || !ok {
				t.Errorf("granted without the sentinel's mark (%v)", err)
			}
			if c == "plugin-container" {
				pluginKeptOut(t, objPath)
			}
			release(t, r.g)
			if h := foHolders(t, conn, objPath); len(h) != 0 {
				t.Errorf("the data still names %v", h)
			}
		})
	}
}

// The lock root is gone (an operator deleted it) when two engines
// first-touch a new object at once, a third asking for a lock-delay: the
// first-touch multis fail with NoNode, create nothing, and the two-write
// path makes the root and the object. All three are granted, one at a
// time, tokens increasing, none delayed, nothing left.
func TestReviewFirstOneNoRoot(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	es := []*lock.Engine{
		newEngine(t, zkServer.Servers(), root, native, noAudit),
		newEngine(t, zkServer.Servers(), root, native, noAudit),
		newEngine(t, zkServer.Servers(), root, native, noAudit),
	}
	var full int32
	defer func() {
		if full == 0 {
			t.Errorf("no round saw two first-touch multis held at once: the race under test never happened")
		}
	}()
	for round := range 3 {
		if err := faDeleteAll(conn, root); err != nil {
			t.Fatal(err)
		}
		obj := fmt.Sprint("nr-", round)
		bar := &foBarrier{prefix: "nr-", k: 2, n: map[string]int{}, ch: map[string]chan struct{}{}}
		undo := lock.SetFastMultiHook(bar.hook)
		var chk overlapChecker
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, e := range es {
			opts := lock.AcquireOptions{Wait: 30 * time.Second}
			if i == 2 {
				opts.LockDelay = time.Minute
			}
			wg.Go(func() {
				<-start
				g, err := e.Acquire(context.Background(), obj, lock.Foreground, opts)
				if err != nil {
					t.Errorf("round %d engine %d: %v", round, i, err)
					return
				}
				chk.enter(g.Token())
				time.Sleep(2 * time.Millisecond) // a holder that stays a moment: not a condition of the test
				chk.leave()
				if err := g.Release(context.Background()); err != nil {
					t.Errorf("release: %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
		undo()
		full += bar.full.Load()
		chk.verify(t, len(es))
		if d := es[2].Health().LockDelays; d != 0 {
			t.Errorf("%d lock-delays (nobody vanished)", d)
		}
		if k := children(t, conn, root, obj); len(k) != 1 || k[0] != "privateLock" {
			t.Errorf("round %d left %v; want the sentinel only", round, k)
		}
	}
}

// The prediction a first-touch grant leaves (our child's sequence number
// + 1, the data version our release wrote): another engine's request
// queued while we held (its child took that sequence number), and our
// release named nobody (we knew of no waiter) — or another engine came
// just after our release. Our next acquire, right after the release, must
// not be granted ahead of it: it came first.
func TestReviewFirstOneNextAfterRelease(t *testing.T) {
	for _, when := range []string{"while-held", "after-release"} {
		t.Run(when, func(t *testing.T) {
			root := testRoot(t, zkServer)
			conn := rawConn(t, zkServer.Servers())
			wconn := rawConn(t, zkServer.Servers())
			eA := newEngine(t, zkServer.Servers(), root, native, noAudit, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
			release(t, acquire(t, eA, "warm", lock.Foreground, lock.AcquireOptions{}))
			obj := fmt.Sprint("na-", time.Now().UnixNano())
			objPath := root + "/" + obj
			ran, _ := faHook(t, obj, func(string) {})
			g1 := acquire(t, eA, obj, lock.Foreground, lock.AcquireOptions{RequestID: "rqA"})
			if !ran() {
				t.Fatal("no first-touch multi")
			}
			if k := faKids(t, conn, objPath); len(k) != 1 || k[0] != g1.Node() {
				t.Fatalf("after the first touch: %v, want A's child alone", k)
			}
			// a waiter made by hand (another participant queueing: it
			// never takes by itself), foreground
			var w string
			mkWaiter := func() {
				var err error
				w, err = wconn.Create(objPath+"/A_x_byhand_", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
				if err != nil {
					t.Fatal(err)
				}
			}
			if when == "while-held" {
				mkWaiter()
			}
			release(t, g1)
			if when == "after-release" {
				mkWaiter()
			}
			ach := grantAsync(context.Background(), eA, obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, RequestID: "rqA2"})
			if r, granted := queuedOrGranted(t, conn, ach, objPath, "rqA2"); granted {
				if r.err == nil {
					_ = r.g.Release(context.Background()) // its error aside: the failure is the grant
				}
				t.Fatalf("the next acquire granted (%v) ahead of the waiter %s", r.err, path.Base(w))
			}
			if err := wconn.Delete(w, -1); err != nil {
				t.Fatal(err)
			}
			r := <-ach
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.g.Token() <= g1.Token() {
				t.Errorf("token %d after %d", r.g.Token(), g1.Token())
			}
			release(t, r.g)
		})
	}
}

// The same with another engine's request queued while we held our
// first-touch grant (we knew of no waiter: our release names nobody, and
// leaves a prediction): our next acquire, right after the release, races
// that request's wake-up; it came first and is granted first, never both
// at once, tokens increase.
func TestReviewFirstOneNextAfterReleaseEngine(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	eA := newEngine(t, zkServer.Servers(), root, native, noAudit, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
	eB := newEngine(t, zkServer.Servers(), root, native, noAudit)
	release(t, acquire(t, eA, "warm", lock.Foreground, lock.AcquireOptions{}))
	for i := range 5 {
		obj := fmt.Sprint("ne-", i, "-", time.Now().UnixNano())
		objPath := root + "/" + obj
		ran, undo := faHook(t, obj, func(string) {})
		g1 := acquire(t, eA, obj, lock.Foreground, lock.AcquireOptions{RequestID: "rqA"})
		undo()
		if !ran() {
			t.Fatal("no first-touch multi")
		}
		bch := grantAsync(context.Background(), eB, obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, RequestID: "rqB"})
		waitFor(t, 20*time.Second, "B queued", func() bool { return len(faKids(t, conn, objPath)) == 2 })
		release(t, g1)
		ach := grantAsync(context.Background(), eA, obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, RequestID: "rqA2"})
		var chk overlapChecker
		chk.last = g1.Token()
		var first asyncResult
		select {
		case first = <-bch:
		case a := <-ach:
			if a.err == nil {
				_ = a.g.Release(context.Background()) // its error aside: the failure is the grant
			}
			t.Fatalf("round %d: A's next acquire granted (%v) ahead of B, which queued while A held", i, a.err)
		case <-time.After(30 * time.Second):
			t.Fatal("stuck")
		}
		if first.err != nil {
			t.Fatal(first.err)
		}
		chk.enter(first.g.Token())
		select {
		case a := <-ach:
			if a.err == nil {
				_ = a.g.Release(context.Background()) // its error aside: the failure is the grant
			}
			t.Fatalf("round %d: A granted (%v) while B holds", i, a.err)
		case <-time.After(20 * time.Millisecond): // a grant beside it would show here: not a condition of the pass
		}
		chk.leave()
		release(t, first.g)
		a := <-ach
		if a.err != nil {
			t.Fatal(a.err)
		}
		chk.turn(a.g)
		release(t, a.g)
		chk.verify(t, 2)
	}
}

// The first-touch multi is applied, its answer lost, and the session
// expires before the engine can reconnect: our child goes with it, our
// name stays in the data (a holder that vanished, though it was never
// told it held). The request ends (or is granted later on a new session);
// another engine's request with a lock-delay is granted (after waiting
// it out, at most); never both at once, tokens increase, and nothing is
// left: no child, no name in the data once all is released.
func TestReviewFirstOneCutSessionExpired(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	dd := &stepDialer{}
	eA := newEngine(t, zkServer.Servers(), root, native, noAudit, func(o *lock.Options) { o.Dialer = dd.dial })
	eC := newEngine(t, zkServer.Servers(), root, native, noAudit)
	release(t, acquire(t, eA, "warm", lock.Foreground, lock.AcquireOptions{}))
	sid := eA.Health().SessionID
	obj := fmt.Sprint("se-", time.Now().UnixNano())
	objPath := root + "/" + obj
	cut := dd.onceRefuse(isObjectCreate(objPath))
	bg := context.Background()
	ach := grantAsync(bg, eA, obj, lock.Foreground, lock.AcquireOptions{Wait: 40 * time.Second, RequestID: "rqA"})
	waitClosed(t, cut, "the cut of the first-touch multi")
	if !waitUntil(10*time.Second, func() bool { _, st, err := conn.Get(objPath); return err == nil && st.NumChildren == 2 }) {
		t.Fatal("setup: the one multi did not land")
	}
	// the session expires: our child goes with it
	if !waitUntil(30*time.Second, func() bool { _, st, err := conn.Get(objPath); return err == nil && st.NumChildren == 1 }) {
		t.Fatalf("our child did not go with the session (expired, or is the child not ephemeral?): children %v", faKids(t, conn, objPath))
	}
	if h := foHolders(t, conn, objPath); len(h) != 1 || !strings.HasPrefix(h[0], "rqA~") {
		t.Fatalf("setup: the data names %v, want rqA's request (the multi applied)", h)
	}
	cch := grantAsync(bg, eC, obj, lock.Foreground, lock.AcquireOptions{Wait: 40 * time.Second, LockDelay: 500 * time.Millisecond})
	dd.let()
	var chk overlapChecker
	granted := 0
	for range 2 {
		var r asyncResult
		select {
		case r = <-ach:
		case r = <-cch:
		case <-time.After(60 * time.Second):
			t.Fatal("stuck")
		}
		if r.err != nil {
			t.Logf("a request ended: %v", r.err)
			continue
		}
		granted++
		chk.enter(r.g.Token())
		time.Sleep(10 * time.Millisecond) // a holder that stays a moment: not a condition of the test
		chk.leave()
		release(t, r.g)
	}
	chk.verify(t, granted)
	if granted == 0 {
		t.Fatal("nobody was granted")
	}
	// (the lost session stays current until its successor is open: the
	// engine opens it without its mutex, so a look right after the loss
	// can still see the old one)
	if !waitUntil(5*time.Second, func() bool { return eA.Health().SessionID != sid }) {
		t.Error("setup: A's session did not change")
	}
	t.Logf("%d granted; C's lock-delays %d", granted, eC.Health().LockDelays)
	// eventually nothing of rqA's: the children (testRoot's check) and the data
	if !waitUntil(20*time.Second, func() bool { return len(foHolders(t, conn, objPath)) == 0 && len(faKids(t, conn, objPath)) == 0 }) {
		t.Errorf("left: children %v, holders %v", faKids(t, conn, objPath), foHolders(t, conn, objPath))
	}
	// and the object is free for anyone without a delay
	c := acquire(t, eC, obj, lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
	release(t, c)
}

// The engine knows the object's sentinel from earlier turns (and reads
// first: its prediction was refused once), then an operator deletes the
// object node. The next acquire reads no node and sends the first-touch
// multi; just before it a plugin takes the new object node (ephemeral
// privateLock) or queues on it ("A-" child), or another engine's first
// touch takes it. The multi creates nothing; the sentinel the engine
// remembers is not there: beside the plugin the request fails with
// ErrForeignNode and leaves nothing, behind the engine it waits its turn.
func TestReviewFirstOneCachedSentinelThenNode(t *testing.T) {
	acl := zk.WorldACL(zk.PermAll)
	for _, c := range []string{"plugin-sentinel", "plugin-queued", "engine"} {
		t.Run(c, func(t *testing.T) {
			root := testRoot(t, zkServer)
			conn, eA, eB, obs := predictors(t, root)
			pconn := rawConn(t, zkServer.Servers())
			obj := "cs"
			objPath := root + "/" + obj
			predicted(t, eA, eB, obs, conn, objPath, obj, true)
			if err := faDeleteAll(conn, objPath); err != nil {
				t.Fatal(err)
			}
			var bHeld *lock.Grant
			var plNode string
			ran, undo := faHook(t, obj, func(p string) {
				switch c {
				case "plugin-sentinel":
					foPluginHolder(t, pconn, p)
				case "plugin-queued":
					if _, err := pconn.Create(p, nil, 0, acl); err != nil {
						t.Error(err)
					}
					var err error
					if plNode, err = pconn.Create(p+"/A-", nil, zk.FlagEphemeralSequential, acl); err != nil {
						t.Error(err)
					}
				case "engine":
					g, err := eB.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: 10 * time.Second})
					if err != nil {
						t.Error(err)
						return
					}
					bHeld = g
				}
			})
			defer undo()
			ach := grantAsync(context.Background(), eA, obj, lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second, RequestID: "rqA"})
			var r asyncResult
			if c == "engine" {
				waitFor(t, 20*time.Second, "the hook", ran)
				if bHeld == nil {
					t.Fatal("setup: B was not granted")
				}
				foMustQueue(t, conn, ach, objPath, "B")
				release(t, bHeld)
			}
			r = <-ach
			if !ran() {
				t.Fatal("the hook never ran: no first-touch multi")
			}
			if c == "engine" {
				if r.err != nil {
					t.Fatal(r.err)
				}
				if r.g.Token() <= bHeld.Token() {
					t.Errorf("token %d after %d", r.g.Token(), bHeld.Token())
				}
				release(t, r.g)
				return
			}
			if !errors.Is(r.err, lock.ErrForeignNode) {
				if r.err == nil {
					_ = r.g.Release(context.Background()) // its error aside: the failure is the grant
				}
				t.Fatalf("beside a plugin participant: %v; want ErrForeignNode", r.err)
			}
			if k := faKids(t, conn, objPath); !(len(k) == 0 || len(k) == 1 && plNode != "" && k[0] == path.Base(plNode)) {
				t.Errorf("left %v", k)
			}
			// the plugin lets go
			if c == "plugin-sentinel" {
				if err := pconn.Delete(objPath+"/privateLock", -1); err != nil {
					t.Fatal(err)
				}
			} else if err := pconn.Delete(plNode, -1); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Three engines race first-touch multis on new objects (held and sent
// together), every request held until all three have answered: with
// TryOnce, exactly one is granted per object (the multi that made the node)
// and the others are told no at once, leaving nothing; all shared, all
// three are granted together (the losers join the winner's shared grant).
func TestReviewFirstOneTryOnceAndSharedRace(t *testing.T) {
	for _, c := range []string{"try-once", "shared"} {
		t.Run(c, func(t *testing.T) {
			root := testRoot(t, zkServer)
			conn := rawConn(t, zkServer.Servers())
			es := []*lock.Engine{
				newEngine(t, zkServer.Servers(), root, native, noAudit),
				newEngine(t, zkServer.Servers(), root, native, noAudit),
				newEngine(t, zkServer.Servers(), root, native, noAudit),
			}
			for _, e := range es {
				release(t, acquire(t, e, "warm", lock.Foreground, lock.AcquireOptions{}))
			}
			bar := &foBarrier{prefix: "to-", k: len(es), n: map[string]int{}, ch: map[string]chan struct{}{}}
			undo := lock.SetFastMultiHook(bar.hook)
			defer undo()
			const objects = 4
			for o := range objects {
				obj := fmt.Sprint("to-", o)
				var wg, answered sync.WaitGroup
				answered.Add(len(es))
				var granted atomic.Int32
				var chk rwChecker
				allIn := make(chan struct{})
				for i, e := range es {
					wg.Go(func() {
						opts := lock.AcquireOptions{Wait: 20 * time.Second, TryOnce: c == "try-once", Shared: c == "shared"}
						g, err := e.Acquire(context.Background(), obj, lock.Foreground, opts)
						if err == nil {
							granted.Add(1)
							chk.enter(opts.Shared, g.Token())
						} else if c == "shared" {
							t.Errorf("%s engine %d: %v", obj, i, err)
						}
						answered.Done()
						if err != nil {
							return
						}
						select { // hold until every request has answered
						case <-allIn:
						case <-time.After(30 * time.Second):
							t.Errorf("%s: the others never answered", obj)
						}
						chk.leave(opts.Shared)
						if err := g.Release(context.Background()); err != nil {
							t.Errorf("release: %v", err)
						}
					})
				}
				answered.Wait()
				close(allIn)
				wg.Wait()
				want := int32(1)
				if c == "shared" {
					want = int32(len(es))
				}
				if granted.Load() != want || chk.violations != 0 || chk.badToken != 0 {
					t.Errorf("%s: %d granted at once (want %d), %d violations, %d tokens not increasing", obj, granted.Load(), want, chk.violations, chk.badToken)
				}
				if k := children(t, conn, root, obj); len(k) != 1 || k[0] != "privateLock" {
					t.Errorf("%s left %v; want the sentinel only", obj, k)
				}
			}
			if bar.full.Load() == 0 {
				t.Errorf("no object saw %d first-touch multis at once: the race under test never happened", bar.k)
			}
		})
	}
}

// The engine remembers the object's sentinel (and reads first: its
// prediction was refused once) when an operator deletes the whole lock
// root. Its next acquire reads no node; its first-touch multi finds no
// root (NoNode) and creates nothing; the remembered sentinel must not
// stand for the root and object that are gone: the request makes them and
// is granted, another engine's request alongside after it or before,
// never both at once, nothing left.
func TestReviewFirstOneNoRootCachedSentinel(t *testing.T) {
	root := testRoot(t, zkServer)
	conn, eA, eB, obs := predictors(t, root)
	obj := "nc"
	objPath := root + "/" + obj
	predicted(t, eA, eB, obs, conn, objPath, obj, true)
	if err := faDeleteAll(conn, root); err != nil {
		t.Fatal(err)
	}
	ran, undo := faHook(t, obj, func(string) {})
	defer undo()
	ach := grantAsync(context.Background(), eA, obj, lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
	bch := grantAsync(context.Background(), eB, obj, lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
	var chk overlapChecker
	if err := takeBoth(t, &chk, ach, bch); err != nil {
		t.Fatal(err)
	}
	chk.verify(t, 2)
	if !ran() {
		t.Error("no fast multi was sent on the object")
	}
	if k := children(t, conn, root, obj); len(k) != 1 || k[0] != "privateLock" {
		t.Errorf("left %v; want the sentinel only", k)
	}
}

// foMustQueue fails the test if A's acquire (ach, request id rqA) is
// granted beside what holds the object (named by beside) rather than
// queued behind it; a wrong grant is released first, so the failure
// names it.
func foMustQueue(t *testing.T, conn *zk.Conn, ach <-chan asyncResult, objPath, beside string) {
	t.Helper()
	r, granted := queuedOrGranted(t, conn, ach, objPath, "rqA")
	if granted {
		if r.err == nil {
			_ = r.g.Release(context.Background()) // its error aside: the failure is the grant
		}
		t.Fatalf("A granted (%v) beside %s", r.err, beside)
	}
}

// foPluginHolder makes the object node p as a plugin holder does (a
// persistent node, its ephemeral privateLock), on conn's session.
func foPluginHolder(t *testing.T, conn *zk.Conn, p string) {
	t.Helper()
	acl := zk.WorldACL(zk.PermAll)
	if _, err := conn.Multi(
		&zk.CreateRequest{Path: p, Acl: acl},
		&zk.CreateRequest{Path: p + "/privateLock", Acl: acl, Flags: zk.FlagEphemeral},
	); err != nil {
		t.Error(err)
	}
}
