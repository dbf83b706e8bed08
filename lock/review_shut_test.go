package lock_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/lock"
)

// Review of 7292ced (lock/session.go shutConn): a given-up or closed
// session closes its own TCP connection once the connection has gone or one
// session timeout after go-zookeeper's Close, and its dialer refuses every
// later dial. What these tests hold it to:
//   - a healthy server still deletes a closed or given-up session's nodes at
//     once (closeSession is sent and answered before the TCP connection is
//     closed): not a session timeout later;
//   - a dial in flight when the session is shut never becomes a live
//     connection (one host, and several hosts, which go-zookeeper's connect
//     cycles without looking at Close);
//   - a dial that became a connection while Close waited is the one closed;
//   - the session that replaced a given-up one is never touched: its
//     connection stays open and its grant valid while the old one is shut;
//   - Engine.Close waits for a session given up just before it to be shut
//     (TestReviewShutCloseWaitsForGivenUpSession: it does not).

// shutDialer dials ZooKeeper (every address to one server when redirect is
// set: several "hosts" for go-zookeeper, one ZooKeeper) and can hold dials
// at a gate after the TCP connection is made, swallow requests (all but
// the connect request and pings, like monDialer's stall) on every
// connection or on those open now, and cut connections. It records every
// connection and whether the client closed it.
type shutDialer struct {
	redirect string
	swallow  atomic.Bool // every connection, also those dialed later

	mu      sync.Mutex
	conns   []*shutTestConn
	gate    chan struct{} // non-nil: dials wait until it is closed
	blocked chan string   // a dial waiting at the gate sends its address
}

type shutTestConn struct {
	net.Conn
	d      *shutDialer
	addr   string
	writes atomic.Int64
	drop   atomic.Bool // this connection swallows (stallNow)
	closed atomic.Bool // the client (Baton, go-zookeeper) closed it
	cut    atomic.Bool // the test closed it
}

func newShutDialer(redirect string) *shutDialer {
	return &shutDialer{redirect: redirect, blocked: make(chan string, 16)}
}

func (d *shutDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	to := addr
	if d.redirect != "" {
		to = d.redirect
	}
	c, err := net.DialTimeout(network, to, timeout)
	if err != nil {
		return nil, err
	}
	sc := &shutTestConn{Conn: c, d: d, addr: addr}
	d.mu.Lock()
	d.conns = append(d.conns, sc)
	gate := d.gate
	d.mu.Unlock()
	if gate != nil {
		select {
		case d.blocked <- addr:
		default:
		}
		<-gate
	}
	return sc, nil
}

// hold makes later dials wait at the gate until open.
func (d *shutDialer) hold() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gate == nil {
		d.gate = make(chan struct{})
	}
}

// open lets the held dials (and later ones) through.
func (d *shutDialer) open() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gate != nil {
		close(d.gate)
		d.gate = nil
	}
}

// stallNow swallows requests on the connections open now.
func (d *shutDialer) stallNow() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.drop.Store(true)
	}
}

// cutAll closes every connection open now, as a network failure would.
func (d *shutDialer) cutAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		if !c.closed.Load() && !c.cut.Load() {
			c.cut.Store(true)
			c.Conn.Close()
		}
	}
}

// dials counts the connections made.
func (d *shutDialer) dials() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns)
}

// conn returns the i-th connection made (nil if none).
func (d *shutDialer) conn(i int) *shutTestConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	if i < len(d.conns) {
		return d.conns[i]
	}
	return nil
}

// live describes the connections neither the client closed nor the test
// cut: "" when there is none.
func (d *shutDialer) live() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var s []string
	for i, c := range d.conns {
		if !c.closed.Load() && !c.cut.Load() {
			s = append(s, fmt.Sprintf("#%d to %s", i, c.addr))
		}
	}
	return strings.Join(s, ", ")
}

func (c *shutTestConn) Write(p []byte) (int, error) {
	first := c.writes.Add(1) == 1
	if !first && (c.drop.Load() || c.d.swallow.Load()) && len(p) >= 12 && int32(binary.BigEndian.Uint32(p[8:12])) != opPing {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *shutTestConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

// shutEngine is an engine over d with the audit off and the given session
// timeout, on servers.
func shutEngine(t *testing.T, d *shutDialer, servers []string, root string, timeout time.Duration) *lock.Engine {
	t.Helper()
	e := newEngine(t, servers, root, func(o *lock.Options) {
		o.Dialer = d.dial
		o.AuditInterval = -1
		o.SessionTimeout = timeout
	})
	// Cleanups run last first: the gate opens and the swallowing stops
	// before the engine closes.
	t.Cleanup(func() { d.swallow.Store(false); d.open() })
	return e
}

// shutHasNodes reports whether obj has children under root.
func shutHasNodes(t *testing.T, conn *zk.Conn, root, obj string) bool {
	t.Helper()
	name, err := lock.EscapeObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	kids, _, err := conn.Children(root + "/" + name)
	if errors.Is(err, zk.ErrNoNode) {
		return false
	}
	return err != nil || len(kids) > 0
}

// shutCloseAsync runs e.Close on a goroutine and returns a channel closed
// when it returned.
func shutCloseAsync(e *lock.Engine) <-chan struct{} {
	done := make(chan struct{})
	go func() { _ = e.Close(); close(done) }()
	return done
}

// A healthy server, an engine closed: closeSession is sent and answered
// before the connection is closed, so the server deletes the session's
// nodes at once, as before shutConn, and Close returns at once. With an
// 8 s session, a lost closeSession (the connection closed first) leaves the
// nodes until the server expires the session, 8 s later.
func TestReviewShutHealthyClosePrompt(t *testing.T) {
	t.Parallel()
	const timeout = 8 * time.Second
	root := testRoot(t, zkServer)
	d := newShutDialer("")
	e := shutEngine(t, d, zkServer.Servers(), root, timeout)
	conn := rawConn(t, zkServer.Servers())
	objs := []string{"RS-healthy-1", "RS-healthy-2"}
	for _, o := range objs {
		acquire(t, e, o, lock.Foreground, lock.AcquireOptions{})
	}
	for _, o := range objs {
		if !shutHasNodes(t, conn, root, o) {
			t.Fatalf("%s: no nodes while held", o)
		}
	}
	start := time.Now()
	closed := shutCloseAsync(e)
	waitFor(t, timeout+5*time.Second, "the closed session's nodes gone", func() bool {
		for _, o := range objs {
			if shutHasNodes(t, conn, root, o) {
				return false
			}
		}
		return true
	})
	gone := time.Since(start)
	select {
	case <-closed:
	case <-time.After(timeout + 5*time.Second):
		t.Fatal("Close did not return")
	}
	took := time.Since(start)
	t.Logf("healthy Close: nodes gone after %v, Close returned after %v", gone.Round(time.Millisecond), took.Round(time.Millisecond))
	if gone > 2*time.Second {
		t.Errorf("a healthy server kept the closed session's nodes %v (session timeout %v): closeSession lost?", gone.Round(time.Millisecond), timeout)
	}
	if took > 3*time.Second {
		t.Errorf("Close took %v on a healthy server", took.Round(time.Millisecond))
	}
	waitFor(t, 5*time.Second, "every connection closed", func() bool { return d.live() == "" })
}

// A session given up on a healthy connection (a reconnect shortened its
// timeout: handshake fails it) is closed through closeConn: closeSession is
// answered and its nodes go at once, not a session timeout later.
func TestReviewShutGivenUpHealthyPrompt(t *testing.T) {
	t.Parallel()
	const timeout = 8 * time.Second
	root := testRoot(t, zkServer)
	d := &monDialer{}
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) {
		o.Dialer = d.dial
		o.AuditInterval = -1
		o.SessionTimeout = timeout
	})
	conn := rawConn(t, zkServer.Servers())
	const obj = "RS-shrunk"
	g := acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
	time.Sleep(300 * time.Millisecond)
	d.shrinkTo.Store(1000)
	d.cut()
	select {
	case <-g.Done():
	case <-time.After(timeout):
		t.Skip("the reconnect did not shorten the deadline (see TestReviewMonReconnectShrinkLoses)")
	}
	lostAt := time.Now()
	if !errors.Is(g.Err(), lock.ErrSessionLost) {
		t.Fatalf("grant ended with %v, want ErrSessionLost", g.Err())
	}
	waitFor(t, timeout+5*time.Second, "the given-up session's nodes gone", func() bool { return !shutHasNodes(t, conn, root, obj) })
	gone := time.Since(lostAt)
	t.Logf("given up on a healthy connection (%v): nodes gone %v later", g.Err(), gone.Round(time.Millisecond))
	if gone > 3*time.Second {
		t.Errorf("a healthy server kept the given-up session's nodes %v (session timeout %v): closeSession lost?", gone.Round(time.Millisecond), timeout)
	}
}

// A dial in flight when the engine closes a disconnected session: Close
// waits a second for its closeSession, the session is shut while the dial
// still waits, and the dial completes after. It must be refused (closed,
// and no other dialed but to go round the hosts once): otherwise the
// session comes back on it, its closeSession is swallowed (a server that
// answers pings only), and it stays connected and pinging, its nodes kept,
// for as long as the process lives. With three hosts go-zookeeper's connect
// goes on to the next host after a refused dial without looking at Close.
func TestReviewShutDialInFlightRefused(t *testing.T) {
	for _, hosts := range []int{1, 3} {
		t.Run(fmt.Sprintf("hosts=%d", hosts), func(t *testing.T) {
			t.Parallel()
			const timeout = 4 * time.Second
			root := testRoot(t, zkServer)
			servers, real := shutServers(t, hosts)
			d := newShutDialer(real)
			e := shutEngine(t, d, servers, root, timeout)
			conn := rawConn(t, zkServer.Servers())
			const obj = "RS-inflight"
			acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
			d.hold()
			d.swallow.Store(true) // the connection the held dial makes swallows closeSession
			cutAt := time.Now()
			d.cutAll()
			select {
			case addr := <-d.blocked:
				t.Logf("a dial to %s waits at the gate (cut+%v)", addr, time.Since(cutAt).Round(time.Millisecond))
			case <-time.After(5 * time.Second):
				t.Fatal("go-zookeeper did not dial again after the cut")
			}
			closed := shutCloseAsync(e)
			select {
			case <-closed:
			case <-time.After(timeout + 5*time.Second):
				t.Fatal("Close did not return")
			}
			t.Logf("Close returned at cut+%v; opening the gate", time.Since(cutAt).Round(time.Millisecond))
			if time.Since(cutAt) > timeout-3*time.Second/2 {
				t.Skip("too slow: the server may have expired the session before the held dial completes")
			}
			// Engine.Close's shutConn has returned; closeConn's, run by the
			// session's fail, returns with it (go-zookeeper's Close is one
			// sync.Once): give it a moment, so that neither still waits on
			// the session's state when the dial completes. (Without the
			// pause, closeConn's shutConn sometimes saw the connection come
			// back and closed it at its timer: a dialer that ignored shut
			// then passed in one run of two.)
			time.Sleep(300 * time.Millisecond)
			d.open()
			// The held dial is refused; the others go round the hosts once.
			waitFor(t, 5*time.Second, "no live connection after the held dial", func() bool { return d.live() == "" })
			time.Sleep(2 * time.Second)
			if l := d.live(); l != "" {
				t.Errorf("live connections of a closed engine: %s", l)
			}
			// go-zookeeper's connect goes round the hosts once (one dial
			// each, the held one included) and then sees the Close.
			n := d.dials()
			time.Sleep(time.Second)
			if m := d.dials(); m != n || m > 1+hosts {
				t.Errorf("%d dials after the cut (%d a second before); want at most %d, then none", m-1, n-1, hosts)
			}
			waitFor(t, 2*timeout+5*time.Second, "the closed session's nodes gone", func() bool { return !shutHasNodes(t, conn, root, obj) })
			t.Logf("nodes gone at cut+%v", time.Since(cutAt).Round(time.Millisecond))
		})
	}
}

// A dial that completes while Close waits for its closeSession (the
// session not yet shut): go-zookeeper takes the connection, the session
// comes back on it, the closeSession queued meanwhile is sent on it and
// swallowed. shutConn must close that connection, the one dialed last, not
// the one the session had when it was closed.
func TestReviewShutDialAcceptedDuringClose(t *testing.T) {
	t.Parallel()
	const timeout = 4 * time.Second
	root := testRoot(t, zkServer)
	d := newShutDialer("")
	e := shutEngine(t, d, zkServer.Servers(), root, timeout)
	conn := rawConn(t, zkServer.Servers())
	const obj = "RS-accepted"
	acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
	d.hold()
	d.swallow.Store(true)
	cutAt := time.Now()
	d.cutAll()
	select {
	case <-d.blocked:
	case <-time.After(5 * time.Second):
		t.Fatal("go-zookeeper did not dial again after the cut")
	}
	closeAt := time.Now()
	closed := shutCloseAsync(e)
	time.Sleep(200 * time.Millisecond) // within Close's second
	d.open()
	waitFor(t, 3*time.Second, "the held dial's connection in use", func() bool {
		c := d.conn(1)
		return c != nil && c.writes.Load() > 0
	})
	select {
	case <-closed:
	case <-time.After(timeout + 5*time.Second):
		t.Fatal("Close did not return")
	}
	t.Logf("Close took %v", time.Since(closeAt).Round(time.Millisecond))
	waitFor(t, 3*time.Second, "the connection dialed during Close closed", func() bool { return d.live() == "" })
	waitFor(t, 2*timeout+5*time.Second, "the closed session's nodes gone", func() bool { return !shutHasNodes(t, conn, root, obj) })
	t.Logf("nodes gone at cut+%v", time.Since(cutAt).Round(time.Millisecond))
}

// A session given up on a stalled connection is shut a session timeout
// later; the session that replaced it must not be touched: its one
// connection stays open, and its grant stays valid (not lost, its
// valid_until moving), while the given-up session's nodes go.
func TestReviewShutReplacementUntouched(t *testing.T) {
	t.Parallel()
	const timeout = 4 * time.Second
	root := testRoot(t, zkServer)
	d := newShutDialer("")
	e := shutEngine(t, d, zkServer.Servers(), root, timeout)
	conn := rawConn(t, zkServer.Servers())
	gA := acquire(t, e, "RS-old", lock.Foreground, lock.AcquireOptions{})
	oldID := e.Health().SessionID
	time.Sleep(100 * time.Millisecond)
	d.stallNow()
	select {
	case <-gA.Done():
	case <-time.After(timeout + 5*time.Second):
		t.Fatal("the stalled session's grant was never told lost")
	}
	lostAt := time.Now()
	// An acquire started before the engine replaced the session would end
	// with the old session's loss (ErrUnavailable): wait for the new one.
	waitFor(t, 10*time.Second, "a new session", func() bool {
		h := e.Health()
		return h.Connected && h.SessionID != oldID
	})
	gB := acquire(t, e, "RS-new", lock.Foreground, lock.AcquireOptions{})
	if d.dials() != 2 {
		t.Fatalf("%d dials, want 2 (the given-up session's, the new one's)", d.dials())
	}
	b := d.conn(1)
	// Past the old session's shut (a session timeout after its close) and
	// the server's expiry of it (a session timeout later), with room.
	end := lostAt.Add(2*timeout + 3*time.Second)
	oldGone := time.Duration(0)
	for time.Now().Before(end) {
		select {
		case <-gB.Done():
			t.Fatalf("the new session's grant ended at lost+%v: %v", time.Since(lostAt).Round(time.Millisecond), gB.Err())
		default:
		}
		if b.closed.Load() {
			t.Fatalf("the new session's connection was closed at lost+%v", time.Since(lostAt).Round(time.Millisecond))
		}
		if u := gB.ValidUntil(); !u.After(time.Now()) {
			t.Fatalf("the new session's grant is valid until %v, in the past (lost+%v)", u, time.Since(lostAt).Round(time.Millisecond))
		}
		if oldGone == 0 && !shutHasNodes(t, conn, root, "RS-old") {
			oldGone = time.Since(lostAt)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if oldGone == 0 {
		t.Errorf("the given-up session's nodes still there at lost+%v", time.Since(lostAt).Round(time.Millisecond))
	} else {
		t.Logf("the given-up session's nodes gone at lost+%v", oldGone.Round(time.Millisecond))
	}
	if !shutHasNodes(t, conn, root, "RS-new") {
		t.Error("the new session's grant's nodes are gone while it holds")
	}
	if c := d.conn(0); c == nil || !c.closed.Load() {
		t.Error("the given-up session's connection is still open")
	}
	release(t, gB)
}

// shutServers returns a server list of n "hosts" for go-zookeeper, all of
// them zkServer through shutDialer's redirect (which it also returns).
func shutServers(t *testing.T, n int) ([]string, string) {
	t.Helper()
	real := zkServer.Servers()[0]
	_, port, err := net.SplitHostPort(real)
	if err != nil {
		t.Fatal(err)
	}
	servers := []string{real}
	for i := 2; i <= n; i++ {
		servers = append(servers, net.JoinHostPort(fmt.Sprintf("127.0.0.%d", i), port))
	}
	return servers, real
}

// Engine.Close "waits for the engine's goroutines". A session given up
// just before (its closeSession swallowed: shutConn waits a session timeout
// before closing its connection) is not waited for: Close returns with that
// session's connection open, go-zookeeper's loops and the session's
// closeConn still running, for up to a session timeout more. Not parallel:
// goleak looks at every goroutine.
func TestReviewShutCloseWaitsForGivenUpSession(t *testing.T) {
	const timeout = 4 * time.Second
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	ignore := lostIgnoreCurrent() // after a pause: go-zookeeper reports a session established before its loops start
	d := newShutDialer("")
	e := shutEngine(t, d, zkServer.Servers(), root, timeout)
	gA := acquire(t, e, "RS-outlive", lock.Foreground, lock.AcquireOptions{})
	oldID := e.Health().SessionID
	time.Sleep(100 * time.Millisecond)
	d.stallNow()
	select {
	case <-gA.Done():
	case <-time.After(timeout + 5*time.Second):
		t.Fatal("the stalled session's grant was never told lost")
	}
	lostAt := time.Now()
	waitFor(t, 10*time.Second, "a new session", func() bool {
		h := e.Health()
		return h.Connected && h.SessionID != oldID
	})
	_ = e.Close()
	closedAt := time.Now()
	t.Logf("given up at lost+0, Close returned at lost+%v", closedAt.Sub(lostAt).Round(time.Millisecond))
	old := d.conn(0)
	if !old.closed.Load() {
		t.Errorf("Close returned with the given-up session's connection open")
	}
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("Close returned with goroutines still running: %v", err)
	}
	waitFor(t, timeout+3*time.Second, "the given-up session's connection closed", func() bool { return old.closed.Load() })
	t.Logf("the given-up session's connection closed at lost+%v", time.Since(lostAt).Round(time.Millisecond))
	waitFor(t, 2*timeout+5*time.Second, "the given-up session's nodes gone", func() bool { return !shutHasNodes(t, conn, root, "RS-outlive") })
}
