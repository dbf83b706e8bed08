package lock_test

// Independent review (nreview) of three commits on the native protocol:
//
//   - 30253f6: an acquire on an object seen contended lately (its sentinel
//     known) creates its child without reading the holders first;
//   - 0f8bdff: a view's two reads (the data, then the children) are sent
//     together (third_party/zk Conn.GetThenChildren) and answered in order;
//   - 735f8ba: a request waits at most learnWaitMax (20 ms) for a local
//     holder's listing of arrivals in flight before creating its child.
//
// Interleavings are forced by a dialer that runs the test's actions just
// before chosen requests reach ZooKeeper, after the reply of an earlier
// request has been read off the socket (so the server has provably
// answered it); the tests count and order things, never time them.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
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

// nrReq is one request frame as the dialer sees it before it is written.
type nrReq struct {
	op    int32
	path  string
	xid   int32
	watch bool // exists, getData, getChildren: the request sets a watch
}

// What a hook does with the request it sees.
const (
	nrPass     = iota // write it
	nrCutAfter        // write it, then cut the connection (applied, reply lost)
	nrCutFirst        // cut the connection instead of writing it (the write fails)
)

// nrDialer runs hook before every request frame (the connect request
// aside) on the connection's send loop, and records which replies have
// been read off the socket (waitReply). readGate, when set, runs before
// every read from the socket (a reply not read yet stays there).
type nrDialer struct {
	mu       sync.Mutex
	hook     func(r nrReq) int
	replies  map[int32]chan struct{}
	readGate atomic.Pointer[func()]
}

func newNrDialer() *nrDialer { return &nrDialer{replies: map[int32]chan struct{}{}} }

func (d *nrDialer) set(f func(r nrReq) int) { d.mu.Lock(); d.hook = f; d.mu.Unlock() }

func (d *nrDialer) reply(xid int32) chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	ch := d.replies[xid]
	if ch == nil {
		ch = make(chan struct{})
		d.replies[xid] = ch
	}
	return ch
}

// waitReply waits (bounded) until the reply to request xid has been read
// off the socket: the server has answered it.
func (d *nrDialer) waitReply(t *testing.T, xid int32) bool {
	select {
	case <-d.reply(xid):
		return true
	case <-time.After(10 * time.Second):
		t.Errorf("reply to xid %d never read", xid)
		return false
	}
}

func (d *nrDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	nc, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &nrConn{Conn: nc, d: d}, nil
}

type nrConn struct {
	net.Conn
	d      *nrDialer
	frames int
	dead   atomic.Bool
	// reply parsing (reads are go-zookeeper's recvLoop's alone)
	rframes int
	hdr     []byte // the length prefix being read
	rem     int    // body bytes left in the current frame
	body    []byte // the current frame's first 4 body bytes (its xid)
}

func (c *nrConn) Read(p []byte) (int, error) {
	if g := c.d.readGate.Load(); g != nil && !c.dead.Load() {
		(*g)()
	}
	n, err := c.Conn.Read(p)
	if c.dead.Load() {
		return 0, errors.New("nrConn: connection cut")
	}
	for _, b := range p[:n] {
		if c.rem == 0 {
			c.hdr = append(c.hdr, b)
			if len(c.hdr) == 4 {
				c.rem = int(binary.BigEndian.Uint32(c.hdr))
				c.hdr, c.body = c.hdr[:0], c.body[:0]
			}
			continue
		}
		if len(c.body) < 4 {
			c.body = append(c.body, b)
		}
		c.rem--
		if c.rem == 0 {
			c.rframes++
			if c.rframes > 1 && len(c.body) == 4 { // the first is the connect reply
				if xid := int32(binary.BigEndian.Uint32(c.body)); xid > 0 {
					close(c.d.reply(xid))
				}
			}
		}
	}
	return n, err
}

func (c *nrConn) Write(p []byte) (int, error) {
	c.frames++
	if c.frames == 1 || c.dead.Load() || len(p) < 12 {
		return c.Conn.Write(p)
	}
	c.d.mu.Lock()
	hook := c.d.hook
	c.d.mu.Unlock()
	op, pth, _ := requestPath(p)
	r := nrReq{op: op, path: pth, xid: int32(binary.BigEndian.Uint32(p[4:8]))}
	if w := 16 + len(pth); (op == 3 || op == 4 || op == 8 || op == 12) && len(p) > w {
		r.watch = p[w] != 0
	}
	act := nrPass
	if hook != nil {
		act = hook(r)
	}
	switch act {
	case nrPass:
		return c.Conn.Write(p)
	case nrCutFirst:
		c.dead.Store(true)
		c.Conn.Close()
		return c.Conn.Write(p)
	}
	c.dead.Store(true)
	n, err := c.Conn.Write(p)
	time.Sleep(30 * time.Millisecond) // the server applies it; its reply is never read
	c.Conn.Close()
	return n, err
}

// nrRawConn is a go-zookeeper client through d.
func nrRawConn(t *testing.T, d *nrDialer) *zk.Conn {
	t.Helper()
	// (the server twice: a reconnect after a cut tries the next address at
	// once, not after go-zookeeper's pause of a second at the end of its
	// list)
	c, _, err := zk.Connect(append(zkServer.Servers(), zkServer.Servers()...), 4*time.Second, zk.WithDialer(d.dial), zk.WithLogger(nrQuiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	waitFor(t, 10*time.Second, "raw connection", func() bool { return c.State() == zk.StateHasSession })
	return c
}

type nrQuiet struct{}

func (nrQuiet) Printf(string, ...any) {}

func nrNative(o *lock.Options) {
	o.Protocol = lock.Native
	o.AuditInterval = -1
	o.HolderWatchDelay = time.Minute
}

func nrObjPath(t *testing.T, root, obj string) string {
	t.Helper()
	name, err := lock.EscapeObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	return path.Join(root, name)
}

// nrRelease releases g, failing the test (not hanging it) if the release
// does not return.
func nrRelease(t *testing.T, g *lock.Grant) {
	t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- g.Release(context.Background()) }()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("Release(%q): %v", g.Object(), err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("Release(%q) never returned", g.Object())
	}
}

// nrContend leaves b knowing obj contended lately and its sentinel, with
// no fast-path prediction (the state in which its next acquire queues
// without reading the holders): a holds, b queues behind it and a second
// request of a behind b; b takes the lock (not alone: no prediction) and
// hands it to a's second request.
func nrContend(t *testing.T, conn *zk.Conn, root string, a, b *lock.Engine, obj string) {
	t.Helper()
	ga := acquire(t, a, obj, lock.Foreground, lock.AcquireOptions{})
	bch := nrAcquireAsync(t, b, obj, lock.Foreground, 20*time.Second)
	waitFor(t, 10*time.Second, "b queued", func() bool { return len(children(t, conn, root, obj)) == 3 })
	ach := nrAcquireAsync(t, a, obj, lock.Foreground, 20*time.Second)
	waitFor(t, 10*time.Second, "a queued behind b", func() bool { return len(children(t, conn, root, obj)) == 4 })
	release(t, ga)
	gb := <-bch
	if gb == nil {
		t.FailNow()
	}
	release(t, gb)
	ga = <-ach
	if ga == nil {
		t.FailNow()
	}
	release(t, ga)
	if c, s, p := b.NreviewObjState(obj); !c || !s || p >= 0 {
		t.Fatalf("b's knowledge of %s: contended %v, sentinel %v, prediction %d; want contended, sentinel, none", obj, c, s, p)
	}
}

// ---- 30253f6: no read of the holders before queueing under contention ----

// An engine that knows the object contended and its sentinel queues at
// once. What the skipped read checked must still be checked, after the
// create: foreign data in the object node, a plugin child under the native
// root, an ephemeral (plugin) privateLock in the sentinel's place — each a
// loud ErrForeignNode naming the root, never a grant, and the child just
// created deleted — and an object node or sentinel an operator deleted (or
// re-created plainly): granted with the sentinel in place again, and
// excluding another engine.
func TestNreviewQueueAtOnceChecksAfterCreate(t *testing.T) {
	type setup func(t *testing.T, conn *zk.Conn, objPath string)
	acl := zk.WorldACL(zk.PermAll)
	foreign := []struct {
		name  string
		setup setup
		names string // the error also names this
	}{
		{"foreign-data", func(t *testing.T, conn *zk.Conn, objPath string) {
			if _, err := conn.Set(objPath, []byte("not baton's"), -1); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"plugin-child", func(t *testing.T, conn *zk.Conn, objPath string) {
			if _, err := conn.Create(objPath+"/A-0000000099", nil, zk.FlagEphemeral, acl); err != nil {
				t.Fatal(err)
			}
		}, "A-0000000099"},
		{"plugin-privatelock", func(t *testing.T, conn *zk.Conn, objPath string) {
			deleteTree(t, conn, objPath+"/privateLock")
			if _, err := conn.Create(objPath+"/privateLock", nil, zk.FlagEphemeral, acl); err != nil {
				t.Fatal(err)
			}
		}, "privateLock"},
		{"recreated-plugin-holder", func(t *testing.T, conn *zk.Conn, objPath string) {
			deleteTree(t, conn, objPath)
			if _, err := conn.Create(objPath, nil, zk.FlagPersistent, acl); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Create(objPath+"/privateLock", nil, zk.FlagEphemeral, acl); err != nil {
				t.Fatal(err)
			}
		}, "privateLock"},
	}
	for _, c := range foreign {
		t.Run(c.name, func(t *testing.T) {
			root := testRoot(t, zkServer)
			conn := rawConn(t, zkServer.Servers())
			a := newEngine(t, zkServer.Servers(), root, nrNative)
			b := newEngine(t, zkServer.Servers(), root, nrNative)
			nrContend(t, conn, root, a, b, "q")
			objPath := nrObjPath(t, root, "q")
			// a separate session for the foreign nodes (ephemerals end with it)
			op := rawConn(t, zkServer.Servers())
			c.setup(t, op, objPath)
			pre := b.PreReads()
			g, err := b.Acquire(context.Background(), "q", lock.Foreground, lock.AcquireOptions{Wait: 3 * time.Second})
			if err == nil {
				release(t, g)
				t.Fatalf("granted (token %d) beside a foreign node", g.Token())
			}
			if !errors.Is(err, lock.ErrForeignNode) || !strings.Contains(err.Error(), root) || !strings.Contains(err.Error(), c.names) {
				t.Fatalf("acquire beside a foreign node: %v; want ErrForeignNode naming %s and %q", err, root, c.names)
			}
			if n := b.PreReads() - pre; n != 0 {
				t.Errorf("the acquire read the holders first (%d): the path under review was not taken", n)
			}
			// our child went with the refusal (no node leaked)
			for _, k := range children(t, conn, root, "q") {
				if strings.HasPrefix(k, "A_") || strings.HasPrefix(k, "B_") {
					t.Errorf("native child %s left after the refusal", k)
				}
			}
			op.Close() // the plugin's ephemerals go
			if c.name == "foreign-data" {
				if _, err := conn.Set(objPath, nil, -1); err != nil {
					t.Fatal(err)
				}
			}
		})
	}

	renewed := []struct {
		name  string
		setup setup
	}{
		{"sentinel-deleted", func(t *testing.T, conn *zk.Conn, objPath string) {
			deleteTree(t, conn, objPath+"/privateLock")
		}},
		{"object-deleted", func(t *testing.T, conn *zk.Conn, objPath string) {
			deleteTree(t, conn, objPath)
		}},
		{"object-recreated-plain", func(t *testing.T, conn *zk.Conn, objPath string) {
			deleteTree(t, conn, objPath)
			if _, err := conn.Create(objPath, nil, zk.FlagPersistent, acl); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range renewed {
		t.Run(c.name, func(t *testing.T) {
			root := testRoot(t, zkServer)
			conn := rawConn(t, zkServer.Servers())
			a := newEngine(t, zkServer.Servers(), root, nrNative)
			b := newEngine(t, zkServer.Servers(), root, nrNative)
			nrContend(t, conn, root, a, b, "q")
			objPath := nrObjPath(t, root, "q")
			c.setup(t, conn, objPath)
			last := int64(0)
			if _, st, err := conn.Get(objPath); err == nil {
				last = st.Mzxid
			}
			pre := b.PreReads()
			g := acquire(t, b, "q", lock.Foreground, lock.AcquireOptions{Wait: 5 * time.Second})
			if n := b.PreReads() - pre; n != 0 {
				t.Errorf("the acquire read the holders first (%d): the path under review was not taken", n)
			}
			if g.Token() <= last {
				t.Errorf("token %d not above the object's last write %d", g.Token(), last)
			}
			// the sentinel is back (persistent, with its mark) ...
			ok, _, err := conn.Exists(objPath + "/privateLock/native")
			if err != nil || !ok {
				t.Errorf("sentinel mark after the grant: exists %v, %v", ok, err)
			}
			if _, st, err := conn.Get(objPath + "/privateLock"); err != nil || st.EphemeralOwner != 0 {
				t.Errorf("sentinel after the grant: %v, %+v", err, st)
			}
			// ... and the grant excludes: another engine is not granted
			// beside it, then is, with a higher token
			if h, err := a.Acquire(context.Background(), "q", lock.Foreground, lock.AcquireOptions{TryOnce: true}); err == nil {
				release(t, h)
				t.Fatalf("a granted (token %d) beside b (token %d)", h.Token(), g.Token())
			}
			ch := make(chan *lock.Grant, 1)
			go func() {
				h, err := a.Acquire(context.Background(), "q", lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
				if err != nil {
					t.Error(err)
				}
				ch <- h
			}()
			waitFor(t, 10*time.Second, "a queued", func() bool { return len(children(t, conn, root, "q")) == 3 })
			if g.State() != lock.Held {
				t.Errorf("b's grant %v while a waits", g.State())
			}
			release(t, g)
			h := <-ch
			if h == nil {
				t.FailNow()
			}
			if h.Token() <= g.Token() {
				t.Errorf("tokens %d then %d", g.Token(), h.Token())
			}
			release(t, h)
		})
	}
}

// The cost claim: under contention between two engines no acquire reads
// the holders before queueing but each engine's first — also when the
// object's queue is long (waiters of both engines) and the holders change
// between the acquires.
func TestNreviewQueueAtOnceNoPreRead(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	es := []*lock.Engine{newEngine(t, zkServer.Servers(), root, nrNative), newEngine(t, zkServer.Servers(), root, nrNative)}
	var chk overlapChecker
	held := acquire(t, es[0], "np", lock.Foreground, lock.AcquireOptions{})
	chk.enter(held.Token())
	const waiters = 6
	grants := make(chan *lock.Grant, waiters)
	for i := range waiters {
		go func() {
			g, err := es[i%2].Acquire(context.Background(), "np", lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
			if err != nil {
				t.Error(err)
			}
			grants <- g
		}()
		// one at a time: each acquire finds the object already contended
		waitFor(t, 10*time.Second, "queued", func() bool { return len(children(t, conn, root, "np")) == i+3 })
	}
	for range waiters {
		chk.leave()
		release(t, held)
		held = <-grants
		if held == nil {
			t.FailNow()
		}
		chk.enter(held.Token())
	}
	chk.leave()
	release(t, held)
	n := es[0].PreReads() + es[1].PreReads()
	chk.verify(t, waiters+1)
	// es[0]'s first (uncontended: it reads) and es[1]'s first; es[0]'s
	// later ones find its own grant active (contended)
	if n > 2 {
		t.Errorf("%d of %d acquires read the holders before queueing", n, waiters+1)
	}
}

// ---- 0f8bdff: the view's two reads in one round trip ----

// Conn.GetThenChildren against the server, with something happening after
// the data read was answered and before the listing is sent: the listing
// is at least as new as the data (a node created between is listed; the
// data read names at most what the listing shows); an error on either
// read is the call's error, never half a result; a cut between the two
// (the listing applied and its reply lost, or never written) is an error,
// and the connection matches later replies to their requests; a Close
// while the listing waits returns at once.
func TestNreviewGetThenChildren(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	acl := zk.WorldACL(zk.PermAll)
	for _, q := range []string{"/t", root} {
		if _, err := conn.Create(q, nil, zk.FlagPersistent, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	p := root + "/gtc"
	d := newNrDialer()
	c := nrRawConn(t, d)
	// between runs act once the first of the call's two requests (on p) is
	// answered and before the second is written, then does what act
	// returns with the second.
	between := func(act func() int) (fired func() bool) {
		var k, done atomic.Int32
		var first int32
		d.set(func(r nrReq) int {
			if r.path != p || (r.op != 4 && r.op != 12 && r.op != 8) {
				return nrPass
			}
			switch k.Add(1) {
			case 1:
				first = r.xid
			case 2:
				d.set(nil)
				defer done.Store(1)
				if d.waitReply(t, first) {
					return act()
				}
			}
			return nrPass
		})
		return func() bool { return done.Load() == 1 }
	}

	t.Run("write-between", func(t *testing.T) {
		if _, err := conn.Create(p, []byte("0"), zk.FlagPersistent, acl); err != nil {
			t.Fatal(err)
		}
		defer deleteTree(t, conn, p)
		for k := 1; k <= 5; k++ {
			fired := between(func() int {
				if _, err := conn.Multi(
					&zk.CreateRequest{Path: fmt.Sprintf("%s/c%d", p, k), Acl: acl, Flags: zk.FlagPersistent},
					&zk.SetDataRequest{Path: p, Data: []byte(strconv.Itoa(k)), Version: -1},
				); err != nil {
					t.Error(err)
				}
				return nrPass
			})
			data, st, kids, cst, err := c.GetThenChildren(p)
			if err != nil || !fired() {
				t.Fatalf("round %d: %v (hook fired %v)", k, err, fired())
			}
			named, _ := strconv.Atoi(string(data))
			// the data says children c1..c<named> exist; the listing,
			// answered after it, must show every one
			for i := 1; i <= named; i++ {
				if !slices.Contains(kids, fmt.Sprintf("c%d", i)) {
					t.Errorf("round %d: data %q (version %d) names c%d, the listing (cversion %d) lacks it: %v", k, data, st.Version, i, cst.Cversion, kids)
				}
			}
			if named != k-1 || len(kids) != k {
				t.Errorf("round %d: data %q, listing %v: want the data before the write, the listing after", k, data, kids)
			}
		}
	})

	t.Run("nonode-then-created", func(t *testing.T) {
		fired := between(func() int {
			if _, err := conn.Create(p, []byte("new"), zk.FlagPersistent, acl); err != nil {
				t.Error(err)
			}
			return nrPass
		})
		defer deleteTree(t, conn, p)
		data, st, kids, _, err := c.GetThenChildren(p)
		if !errors.Is(err, zk.ErrNoNode) || !fired() || data != nil || st != nil || kids != nil {
			t.Fatalf("data read on a missing node, listing after its creation: %q %v %v, %v (hook %v); want ErrNoNode and nothing", data, st, kids, err, fired())
		}
		// later replies still go to their own requests
		if b, _, err := c.Get(p); err != nil || string(b) != "new" {
			t.Fatalf("get after: %q, %v", b, err)
		}
		if b, _, kids, _, err := c.GetThenChildren(p); err != nil || string(b) != "new" || len(kids) != 0 {
			t.Fatalf("GetThenChildren after: %q %v, %v", b, kids, err)
		}
	})

	t.Run("deleted-between", func(t *testing.T) {
		if _, err := conn.Create(p, []byte("x"), zk.FlagPersistent, acl); err != nil {
			t.Fatal(err)
		}
		fired := between(func() int {
			if err := conn.Delete(p, -1); err != nil {
				t.Error(err)
			}
			return nrPass
		})
		data, _, kids, _, err := c.GetThenChildren(p)
		if !errors.Is(err, zk.ErrNoNode) || !fired() || data != nil || kids != nil {
			t.Fatalf("node deleted between the reads: %q %v, %v; want ErrNoNode and nothing", data, kids, err)
		}
	})

	for _, cut := range []int{nrCutAfter, nrCutFirst} {
		t.Run(fmt.Sprintf("cut-between-%d", cut), func(t *testing.T) {
			if _, err := conn.Create(p, []byte("c"), zk.FlagPersistent, acl); err != nil {
				t.Fatal(err)
			}
			defer deleteTree(t, conn, p)
			fired := between(func() int {
				// a write the listing would show, had it been answered
				if _, err := conn.Create(p+"/mid", nil, zk.FlagPersistent, acl); err != nil {
					t.Error(err)
				}
				return cut
			})
			data, _, kids, _, err := c.GetThenChildren(p)
			if err == nil || !fired() {
				t.Fatalf("cut between the reads: %q %v, %v (hook %v); want an error", data, kids, err, fired())
			}
			waitFor(t, 10*time.Second, "reconnected", func() bool { return c.State() == zk.StateHasSession })
			if _, err := conn.Set(p, []byte("c2"), -1); err != nil {
				t.Fatal(err)
			}
			b, _, kids, _, err := c.GetThenChildren(p)
			if err != nil || string(b) != "c2" || !slices.Equal(kids, []string{"mid"}) {
				t.Fatalf("after the cut: %q %v, %v", b, kids, err)
			}
			if b, _, err := c.Get(p); err != nil || string(b) != "c2" {
				t.Fatalf("get after the cut: %q, %v", b, err)
			}
		})
	}

	t.Run("close-while-waiting", func(t *testing.T) {
		if _, err := conn.Create(p, nil, zk.FlagPersistent, acl); err != nil {
			t.Fatal(err)
		}
		defer deleteTree(t, conn, p)
		d2 := newNrDialer()
		c2 := nrRawConn(t, d2)
		hold := make(chan struct{})
		defer close(hold)
		var k atomic.Int32
		d2.set(func(r nrReq) int {
			if r.path == p && (r.op == 4 || r.op == 12) && k.Add(1) == 2 {
				<-hold // the listing does not leave until the test ends
			}
			return nrPass
		})
		res := make(chan error, 1)
		go func() { _, _, _, _, err := c2.GetThenChildren(p); res <- err }()
		waitFor(t, 10*time.Second, "listing held", func() bool { return k.Load() == 2 })
		go c2.Close()
		select {
		case err := <-res:
			if !errors.Is(err, zk.ErrConnectionClosed) {
				t.Fatalf("closed while the listing waited: %v; want ErrConnectionClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("GetThenChildren still waiting after Close")
		}
	})
}

// A native view across sidecars: the waiter W (background, engine b)
// reads the data after the holder H (engine a) released, and before its
// listing a foreground request X (engine c) arrives, sorts ahead of W and
// is granted. The listing shows X's child ahead of W: W must not be
// granted while X holds (a listing older than the data would show W alone
// and X named with no child: a "vanished" holder W would take beside).
// W watches X's child, and is granted after X's release with a higher
// token.
func TestNreviewViewWriteBetweenReads(t *testing.T) {
	root := testRoot(t, zkServer)
	d := newNrDialer()
	a := newEngine(t, zkServer.Servers(), root, nrNative)
	b := newEngine(t, zkServer.Servers(), root, nrNative, func(o *lock.Options) { o.Dialer = d.dial })
	c := newEngine(t, zkServer.Servers(), root, nrNative)
	objPath := nrObjPath(t, root, "vw")
	h := acquire(t, a, "vw", lock.Foreground, lock.AcquireOptions{})
	var chk overlapChecker
	chk.enter(h.Token())

	var (
		x       atomic.Pointer[lock.Grant]
		state   atomic.Int32
		first   int32
		watchX  = make(chan struct{})
		hookErr = make(chan error, 2)
	)
	d.set(func(r nrReq) int {
		view := r.path == objPath && (r.op == 4 || r.op == 12)
		switch state.Load() {
		case 0: // W's create
			if (r.op == 1 || r.op == 15) && path.Dir(r.path) == objPath && strings.HasPrefix(path.Base(r.path), "B_") {
				state.Store(1)
			}
		case 1: // the view's first read: H has released before it
			if view {
				first = r.xid
				chk.leave()
				if err := h.Release(context.Background()); err != nil {
					hookErr <- err
				}
				state.Store(2)
			}
		case 2: // the view's second read: X granted between the two
			if view {
				state.Store(3)
				if !d.waitReply(t, first) {
					return nrPass
				}
				g, err := c.Acquire(context.Background(), "vw", lock.Foreground, lock.AcquireOptions{Wait: 10 * time.Second})
				if err != nil {
					hookErr <- err
					return nrPass
				}
				chk.enter(g.Token())
				x.Store(g)
				state.Store(4)
			}
		case 4: // W watches X's child
			if r.op == 3 && r.path == objPath+"/"+x.Load().Node() {
				state.Store(5)
				close(watchX)
			}
		}
		return nrPass
	})
	wch := nrAcquireAsync(t, b, "vw", lock.Background, 30*time.Second)
	select {
	case <-watchX:
	case w := <-wch:
		if w != nil {
			chk.enter(w.Token())
			t.Errorf("W granted (token %d) while X holds (hook state %d)", w.Token(), state.Load())
			chk.leave()
			release(t, w)
		}
		waitFor(t, 10*time.Second, "hook done", func() bool { return state.Load() != 3 })
		if g := x.Load(); g != nil {
			release(t, g)
		}
		t.FailNow()
	case err := <-hookErr:
		t.Fatal(err)
	case <-time.After(20 * time.Second):
		t.Fatalf("W neither watched X nor was granted (hook state %d)", state.Load())
	}
	d.set(nil)
	chk.leave()
	release(t, x.Load())
	w := <-wch
	if w == nil {
		t.FailNow()
	}
	chk.turn(w)
	release(t, w)
	chk.verify(t, 3)
}

// The cost claim: a view's listing is sent before its data read is
// answered (one round trip). The dialer keeps replies on the socket from
// the view's data read on until its listing has been written (were the
// reads sequential, the listing would wait for that reply: a bound lets
// it go). The view is a waiter's first after its create, behind another
// engine's holder.
func TestNreviewViewOneRoundTrip(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	d := newNrDialer()
	a := newEngine(t, zkServer.Servers(), root, nrNative)
	b := newEngine(t, zkServer.Servers(), root, nrNative, func(o *lock.Options) { o.Dialer = d.dial })
	objPath := nrObjPath(t, root, "rt")
	h := acquire(t, a, "rt", lock.Foreground, lock.AcquireOptions{})
	var (
		state   atomic.Int32
		dataXid atomic.Int32
		listed  = make(chan struct{})
		result  = make(chan string, 1)
	)
	gate := func() {
		if state.Load() == 2 {
			// bounded for a sequential view (its listing waits for this
			// reply); long enough that a loaded machine (make test beside
			// a CPU burner) does not starve a pipelined one past it
			select {
			case <-listed:
			case <-time.After(5 * time.Second):
			}
		}
	}
	d.readGate.Store(&gate)
	d.set(func(r nrReq) int {
		switch state.Load() {
		case 0: // b's create
			if (r.op == 1 || r.op == 15) && path.Dir(r.path) == objPath {
				state.Store(1)
			}
		case 1:
			if r.path == objPath && r.op == 4 {
				dataXid.Store(r.xid)
				state.Store(2)
			}
		case 2:
			if r.path == objPath && (r.op == 12 || r.op == 8) {
				select {
				case <-d.reply(dataXid.Load()):
					result <- "sequential"
				default:
					result <- "pipelined"
				}
				state.Store(3)
				close(listed)
			}
		}
		return nrPass
	})
	ch := nrAcquireAsync(t, b, "rt", lock.Foreground, 30*time.Second)
	waitFor(t, 10*time.Second, "queued", func() bool { return len(children(t, conn, root, "rt")) == 3 })
	var got string
	select {
	case got = <-result:
	case <-time.After(10 * time.Second):
		t.Fatalf("no view after the create (state %d)", state.Load())
	}
	d.readGate.Store(nil)
	d.set(nil)
	release(t, h)
	g := <-ch
	if g == nil {
		t.FailNow()
	}
	release(t, g)
	if got != "pipelined" {
		t.Errorf("the view's listing was sent after its data read was answered (%s): two round trips", got)
	}
}

// ---- 735f8ba: a request waits (bounded) for a local holder's listing ----

// nrLearningHolder returns a grant of e on obj that follows arrivals
// (contended: it queued behind another engine's holder) with its first
// listing of arrivals held before it is sent (gate), and that listing's
// hold released by the returned function.
func nrLearningHolder(t *testing.T, conn *zk.Conn, root string, other, e *lock.Engine, obj string) (*lock.Grant, func()) {
	t.Helper()
	gate := newLearnGate(t)
	hold := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { gate.open(); close(hold) }) }
	t.Cleanup(open)
	gate.set(func() { <-hold })
	g0 := acquire(t, other, obj, lock.Foreground, lock.AcquireOptions{})
	ch := nrAcquireAsync(t, e, obj, lock.Foreground, 20*time.Second)
	waitFor(t, 10*time.Second, "holder queued", func() bool { return len(children(t, conn, root, obj)) == 3 })
	nrRelease(t, g0)
	g := <-ch
	if g == nil {
		t.FailNow()
	}
	waitFor(t, 10*time.Second, "holder's listing held", func() bool { return gate.entered.Load() >= 1 })
	if !g.Learning() {
		t.Fatal("the contended grant does not follow arrivals")
	}
	return g, open
}

// A local holder's listing of arrivals that never comes back (held before
// it is sent): a request of the same engine still creates its child and
// queues (the wait is bounded), is granted after the holder's release (the
// release lists itself: the listing it would join is the held one, so it
// is let go first), and a request whose wait ends during that wait (a
// short Wait, or its context cancelled) leaves no node behind.
func TestNreviewLearnWaitBounded(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	other := newEngine(t, zkServer.Servers(), root, nrNative)
	e := newEngine(t, zkServer.Servers(), root, nrNative)
	h, open := nrLearningHolder(t, conn, root, other, e, "lw")
	var chk overlapChecker
	chk.enter(h.Token())

	// a wait that runs out, and one cancelled, while the listing is held
	for _, how := range []string{"short-wait", "cancelled"} {
		ctx, cancel := context.WithCancel(context.Background())
		o := lock.AcquireOptions{Wait: time.Minute}
		if how == "short-wait" {
			o.Wait = time.Millisecond
		} else {
			cancel()
		}
		g, err := e.Acquire(ctx, "lw", lock.Foreground, o)
		cancel()
		if err == nil {
			release(t, g)
			t.Fatalf("%s: granted (token %d) beside the holder", how, g.Token())
		}
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v; want the wait's end", how, err)
		}
		waitFor(t, 10*time.Second, how+": no node left", func() bool { return len(children(t, conn, root, "lw")) == 2 })
	}

	// a request that waits: its child appears although the listing is
	// still held
	ch := nrAcquireAsync(t, e, "lw", lock.Foreground, 30*time.Second)
	waitFor(t, 10*time.Second, "waiter queued while the holder's listing is held", func() bool {
		return len(children(t, conn, root, "lw")) == 3
	})
	open()
	chk.leave()
	nrRelease(t, h)
	w := <-ch
	if w == nil {
		t.FailNow()
	}
	chk.turn(w)
	nrRelease(t, w)
	chk.verify(t, 2)
}

// The holder's listing of arrivals fails (its connection cut with the
// listing in flight: applied, reply lost): learnNative stops, the listing
// in flight is cleared, and a request of the same engine queued after it
// is named by the holder's release (it told the holder it waits behind
// it); a request of another engine, by a release that lists the object
// itself. Neither waits forever.
func TestNreviewLearnListingFails(t *testing.T) {
	for _, where := range []string{"same-engine", "other-engine"} {
		t.Run(where, func(t *testing.T) {
			root := testRoot(t, zkServer)
			conn := rawConn(t, zkServer.Servers())
			d := newNrDialer()
			other := newEngine(t, zkServer.Servers(), root, nrNative)
			e := newEngine(t, append(zkServer.Servers(), zkServer.Servers()...), root, nrNative, func(o *lock.Options) { o.Dialer = d.dial })
			objPath := nrObjPath(t, root, "lf")
			g0 := acquire(t, other, "lf", lock.Foreground, lock.AcquireOptions{})
			// e's holder queues behind g0; its first listing of arrivals
			// after its grant is cut (the first getChildren with a watch
			// e sends: learnNative's)
			var cut atomic.Bool
			var armed atomic.Bool
			d.set(func(r nrReq) int {
				if armed.Load() && r.op == 12 && r.watch && r.path == objPath && cut.CompareAndSwap(false, true) {
					return nrCutAfter
				}
				return nrPass
			})
			ch := nrAcquireAsync(t, e, "lf", lock.Foreground, 20*time.Second)
			waitFor(t, 10*time.Second, "holder queued", func() bool { return len(children(t, conn, root, "lf")) == 3 })
			armed.Store(true)
			nrRelease(t, g0)
			h := <-ch
			if h == nil {
				t.FailNow()
			}
			waitFor(t, 10*time.Second, "learn listing cut", func() bool { return cut.Load() })
			waitFor(t, 10*time.Second, "reconnected", func() bool { return e.Health().Connected })
			if h.State() != lock.Held {
				t.Fatalf("holder %v after a cut", h.State())
			}
			var chk overlapChecker
			chk.enter(h.Token())
			we := e
			if where == "other-engine" {
				we = other
			}
			r0 := e.ReleaseListings()
			wch := nrAcquireAsync(t, we, "lf", lock.Foreground, 20*time.Second)
			waitFor(t, 10*time.Second, "waiter queued", func() bool { return len(children(t, conn, root, "lf")) == 3 })
			chk.leave()
			nrRelease(t, h)
			w := <-wch
			if w == nil {
				t.FailNow()
			}
			chk.turn(w)
			nrRelease(t, w)
			t.Logf("release listings: %d", e.ReleaseListings()-r0)
			chk.verify(t, 2)
		})
	}
}

// The engine closes while a request of it may be waiting for its holder's
// listing in flight (held): the request ends (unavailable), neither
// granted nor hanging, and the holder is lost with the session; nothing
// is left under the object.
func TestNreviewLearnWaitEngineClosed(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	other := newEngine(t, zkServer.Servers(), root, nrNative)
	e := newEngine(t, zkServer.Servers(), root, nrNative)
	h, open := nrLearningHolder(t, conn, root, other, e, "lc")
	res := make(chan error, 1)
	go func() {
		g, err := e.Acquire(context.Background(), "lc", lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
		if err == nil {
			t.Errorf("granted (token %d) beside the holder (token %d)", g.Token(), h.Token())
		}
		res <- err
	}()
	closed := make(chan struct{})
	go func() { e.Close(); close(closed) }()
	select {
	case err := <-res:
		if !errors.Is(err, lock.ErrUnavailable) && !errors.Is(err, lock.ErrClosed) {
			t.Errorf("request of a closed engine: %v; want unavailable", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a request of a closed engine still waits")
	}
	open() // the held listing (a goroutine of the engine) may end now
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatal("Close never returned")
	}
	if h.State() != lock.Lost {
		t.Errorf("holder %v after its engine closed", h.State())
	}
	// the other engine takes the object (nothing of e's is left)
	nrRelease(t, acquire(t, other, "lc", lock.Foreground, lock.AcquireOptions{Wait: 10 * time.Second}))
}

// Views cut between their two reads, across engines: one engine's
// connection is cut at some of its views' listings (the data read
// answered; the listing applied with its reply lost, or never written),
// while two other engines take the object by turns. Every acquire is
// granted, one at a time, with increasing tokens, and nothing is left.
func TestNreviewViewCutsAcrossEngines(t *testing.T) {
	root := testRoot(t, zkServer)
	d := newNrDialer()
	es := []*lock.Engine{
		// (the server twice: a reconnect after a cut tries the next
		// address at once, not after go-zookeeper's pause of a second at
		// the end of its list)
		newEngine(t, append(zkServer.Servers(), zkServer.Servers()...), root, nrNative, func(o *lock.Options) { o.Dialer = d.dial }),
		newEngine(t, zkServer.Servers(), root, nrNative),
		newEngine(t, zkServer.Servers(), root, nrNative),
	}
	objPath := nrObjPath(t, root, "vc")
	var views, cuts atomic.Int32
	d.set(func(r nrReq) int {
		if r.path != objPath || r.op != 12 || r.watch || cuts.Load() >= 4 {
			return nrPass
		}
		switch views.Add(1) % 3 {
		case 1:
			cuts.Add(1)
			return nrCutAfter
		case 2:
			cuts.Add(1)
			return nrCutFirst
		}
		return nrPass
	})
	var chk overlapChecker
	const per = 6
	var wg sync.WaitGroup
	for i, e := range es {
		wg.Go(func() {
			for k := range per {
				typ := lock.Foreground
				if (i+k)%3 == 0 {
					typ = lock.Background
				}
				g, err := e.Acquire(context.Background(), "vc", typ, lock.AcquireOptions{Wait: 30 * time.Second})
				if err != nil {
					t.Errorf("engine %d: %v", i, err)
					return
				}
				chk.turn(g)
				if err := g.Release(context.Background()); err != nil {
					t.Errorf("engine %d: release: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	d.set(nil)
	t.Logf("%d views listed by the cut engine, %d cut", views.Load(), cuts.Load())
	chk.verify(t, len(es)*per)
	if cuts.Load() == 0 {
		t.Errorf("no view was cut: the case under test did not happen")
	}
}

// The case 735f8ba is about: a local request's create lands inside the
// holder's first listing of arrivals (sent before the create, answered
// after it: the listing misses it), and the holder's release begins while
// that listing's answer is on its way. Forced on one connection: the
// replies are held from the listing's send until the release has begun,
// so the request's wait for the listing (at most 20 ms) runs out and its
// create follows the listing. The release must still name the request
// (one write of the object's data: the handoff) after at most
// one listing besides the holder's first, whoever sends it (and the
// request's own grant's first listing of arrivals).
func TestNreviewReleaseAfterListingMissedArrival(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	d := newNrDialer()
	other := newEngine(t, zkServer.Servers(), root, nrNative)
	e := newEngine(t, zkServer.Servers(), root, nrNative, func(o *lock.Options) { o.Dialer = d.dial })
	objPath := nrObjPath(t, root, "ma")
	g0 := acquire(t, other, "ma", lock.Foreground, lock.AcquireOptions{})
	var (
		state    atomic.Int32 // 1: armed; 2: replies held (listing sent); 3: request's create sent
		openGate = make(chan struct{})
		created  = make(chan struct{})
	)
	gate := func() {
		if state.Load() >= 2 {
			select {
			case <-openGate:
			case <-time.After(10 * time.Second):
			}
		}
	}
	d.readGate.Store(&gate)
	d.set(func(r nrReq) int {
		switch state.Load() {
		case 1: // the holder's first listing of arrivals
			if r.op == 12 && r.watch && r.path == objPath {
				state.Store(2)
			}
		case 2: // the request's create, after it
			if (r.op == 1 || r.op == 15) && path.Dir(r.path) == objPath {
				state.Store(3)
				close(created)
			}
		}
		return nrPass
	})
	hch := nrAcquireAsync(t, e, "ma", lock.Foreground, 20*time.Second)
	waitFor(t, 10*time.Second, "holder queued", func() bool { return len(children(t, conn, root, "ma")) == 3 })
	state.Store(1)
	nrRelease(t, g0)
	h := <-hch
	if h == nil {
		t.FailNow()
	}
	var chk overlapChecker
	chk.enter(h.Token())
	waitFor(t, 10*time.Second, "holder's listing sent", func() bool { return state.Load() >= 2 })
	l0, r0, loc0 := e.LearnListings(), e.ReleaseListings(), e.LocalHandoffs()
	wch := nrAcquireAsync(t, e, "ma", lock.Foreground, 20*time.Second)
	waitClosed(t, created, "the request's create")
	_, st0, err := conn.Get(objPath)
	if err != nil {
		t.Fatal(err)
	}
	rel := make(chan error, 1)
	chk.leave()
	go func() { rel <- h.Release(context.Background()) }()
	waitFor(t, 10*time.Second, "release begun", h.Releasing)
	close(openGate)
	d.readGate.Store(nil)
	if err := <-rel; err != nil {
		t.Fatal(err)
	}
	w := <-wch
	if w == nil {
		t.FailNow()
	}
	chk.enter(w.Token())
	_, st1, err := conn.Get(objPath)
	if err != nil {
		t.Fatal(err)
	}
	learn, relList, local := e.LearnListings()-l0, e.ReleaseListings()-r0, e.LocalHandoffs()-loc0
	chk.leave()
	nrRelease(t, w)
	t.Logf("after the holder's first listing: %d holder's listings, %d release listings; %d local handoffs; %d writes of the data", learn, relList, local, st1.Version-st0.Version)
	chk.verify(t, -1)
	// (in process, or found in the request's own view when that view
	// came after the release's write)
	if st1.Version-st0.Version != 1 {
		t.Errorf("handoff: %d writes of the object's data (%d in process); want 1 (the release named the request)", st1.Version-st0.Version, local)
	}
	// one to find the request (the holder's next, or the release's own)
	// and the request's grant's first listing of arrivals (it waited)
	if learn+relList > 2 {
		t.Errorf("%d listings besides the holder's first (%d of holders, %d of the release); want at most 2", learn+relList, learn, relList)
	}
}

// nrAcquireAsync acquires obj on e within wait in a goroutine; the channel
// gets the grant (nil, and the test failed, on an error).
func nrAcquireAsync(t *testing.T, e *lock.Engine, obj string, typ lock.Type, wait time.Duration) chan *lock.Grant {
	ch := make(chan *lock.Grant, 1)
	go func() {
		g, err := e.Acquire(context.Background(), obj, typ, lock.AcquireOptions{Wait: wait})
		if err != nil {
			t.Error(err)
		}
		ch <- g
	}()
	return ch
}
