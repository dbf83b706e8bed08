package lock_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/testenv"
)

// Review of 38b12b5 (lock/session.go): the monitor is no longer woken when
// the validity base moves, nor by a grant while it is armed; a grant wakes
// the monitor or the keeper only when one of them waits for it
// (monitorIdle, keeperIdle). The safety rule these tests hold it to: a
// holder is told its grant is lost no later than the latest valid_until it
// was told (the session deadline), whenever grants exist; and the keeper
// keeps the validity moving while a grant is held and nothing else reaches
// the leader.

// monDialer dials ZooKeeper and can stall the leader path of the
// connections open at the moment it is armed: every request but pings is
// swallowed (written nowhere, never answered). The server, still pinged,
// keeps the session and go-zookeeper keeps the connection, as with a
// follower cut off from its leader (TestPartitionedFollowerStopsValidity):
// no state change wakes anyone, and nothing answered through the leader
// moves the validity base again. Only the session's monitor can tell the
// holder, at the deadline. Connections dialed later (the next session's)
// are left alone.
type monDialer struct {
	mu    sync.Mutex
	conns []*monConn
	// shrinkTo, when set, rewrites the negotiated timeout of the connect
	// response on the next connection dialed (once): a reconnect on which
	// the server seems to have shortened the session timeout.
	shrinkTo atomic.Int32 // milliseconds; 0: leave it
	shrunkAt time.Time    // when the connection it rewrites was dialed; guarded by mu
}

type monConn struct {
	net.Conn
	writes  int // guarded by go-zookeeper's one writer
	read    int // bytes read; guarded by its one reader
	drop    atomic.Bool
	dropped atomic.Int64
	shrink  int32 // the timeout (ms) to put in the connect response; 0: none
}

func (d *monDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	mc := &monConn{Conn: c, shrink: d.shrinkTo.Swap(0)}
	d.mu.Lock()
	if mc.shrink > 0 {
		d.shrunkAt = time.Now()
	}
	d.conns = append(d.conns, mc)
	d.mu.Unlock()
	return mc, nil
}

// stall swallows, from now on, every request but pings on the connections
// open now.
func (d *monDialer) stall() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.drop.Store(true)
	}
}

// heal lets every request through again.
func (d *monDialer) heal() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.drop.Store(false)
	}
}

// dropped counts the requests swallowed.
func (d *monDialer) dropped() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var n int64
	for _, c := range d.conns {
		n += c.dropped.Load()
	}
	return n
}

// dials counts the connections dialed.
func (d *monDialer) dials() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns)
}

// cut closes every connection open now (go-zookeeper reconnects).
func (d *monDialer) cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.Conn.Close()
	}
}

// Write: go-zookeeper writes each request with one Write (cut_test.go); the
// first is the connect request, which has no xid.
func (c *monConn) Write(p []byte) (int, error) {
	first := c.writes == 0
	c.writes++
	if !first && c.drop.Load() && len(p) >= 12 && int32(binary.BigEndian.Uint32(p[8:12])) != opPing {
		c.dropped.Add(1)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// Read rewrites the connect response's timeout (bytes 8-11 of the stream:
// length, protocolVersion, timeOut) when shrink is set.
func (c *monConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.shrink > 0 && c.read < 12 {
		var v [4]byte
		binary.BigEndian.PutUint32(v[:], uint32(c.shrink))
		for i := range n {
			if off := c.read + i; off >= 8 && off < 12 {
				p[i] = v[off-8]
			}
		}
	}
	c.read += n
	return n, err
}

// monFollowValidity follows g's ValidUntil every 2 ms (safety_test.go's
// followValidityEvery) and keeps the latest instant told.
func monFollowValidity(g *lock.Grant, stop <-chan struct{}) *told {
	return followValidityEvery(g, stop, 2*time.Millisecond)
}

// monLossTolerance is how late, past the latest valid_until told, the
// monitor's fail may reach the holder: a timer's and a goroutine's
// scheduling under -race on a loaded machine. A monitor that is not
// armed is late by seconds (or forever).
const monLossTolerance = 300 * time.Millisecond

// monStallExpectLost stalls d's current connections (see monDialer) while
// g is held, and checks that g is told lost no later than the latest
// valid_until it was told (plus monLossTolerance). It heals d afterwards,
// and releases g if it was never told.
func monStallExpectLost(t *testing.T, d *monDialer, root string, g *lock.Grant, sessionTimeout time.Duration) {
	t.Helper()
	stop := make(chan struct{})
	v := monFollowValidity(g, stop)
	time.Sleep(20 * time.Millisecond) // the follower has read ValidUntil
	d.stall()
	stallAt := time.Now()
	var lostAt time.Time
	select {
	case <-g.Done():
		lostAt = time.Now()
	case <-time.After(sessionTimeout + 5*time.Second):
	}
	d.heal()
	close(stop)
	maxTold := v.max()
	if lostAt.IsZero() {
		t.Errorf("the holder was never told its grant lost: %v after the stall (told valid until stall+%v; %d requests swallowed)",
			time.Since(stallAt).Round(time.Millisecond), maxTold.Sub(stallAt).Round(time.Millisecond), d.dropped())
		_ = g.Release(context.Background())
		return
	}
	t.Logf("stall: told valid until stall+%v, told lost at stall+%v (%v after); cause %v; %d requests swallowed",
		maxTold.Sub(stallAt).Round(time.Millisecond), lostAt.Sub(stallAt).Round(time.Millisecond),
		lostAt.Sub(maxTold).Round(time.Millisecond), g.Err(), d.dropped())
	if g.Err() == nil {
		t.Errorf("the grant ended with no loss cause: it was released, not lost")
	}
	if late := lostAt.Sub(maxTold); late > monLossTolerance {
		t.Errorf("the holder was told lost %v after the latest valid_until it was told (tolerance %v)", late, monLossTolerance)
	}
	// The lost session's closeSession, sent as the engine gave it up, may
	// have been swallowed before the heal. The engine then closes that
	// connection itself (shutConn) one session timeout after the close at
	// the latest, and the server expires the session a session timeout
	// later: wait for its nodes to go, with room. (Before shutConn,
	// go-zookeeper kept such a connection open and pinging, and make test
	// saw RM-recon-2's child and privateLock still there 40 s later.)
	name, err := lock.EscapeObject(g.Object())
	if err != nil {
		t.Fatal(err)
	}
	conn := rawConn(t, zkServer.Servers())
	waitFor(t, 30*time.Second, "the lost session's nodes gone", func() bool {
		kids, _, err := conn.Children(root + "/" + name)
		return err == nil && len(kids) == 0 || errors.Is(err, zk.ErrNoNode)
	})
}

// monEngine is an engine over d with the audit off (its requests would
// only add answers) and the default 4 s session.
func monEngine(t *testing.T, d *monDialer, root string) *lock.Engine {
	t.Helper()
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) {
		o.Dialer = d.dial
		o.AuditInterval = -1
	})
	t.Cleanup(d.heal) // before the engine closes (cleanups run last first)
	return e
}

// Scenario 2: the monitor idle (a grant came and went, and its timer fired
// since), the keeper busy (a slow-path acquire waits, so it syncs and does
// not wait for a grant: keeperIdle false). A grant then must wake the
// monitor itself (monitorIdle), and the monitor must tell the holder by the
// deadline when the leader path stalls.
func TestReviewMonGrantWakesIdleMonitor(t *testing.T) {
	t.Parallel()
	root := testRoot(t, zkServer)
	d := &monDialer{}
	e1 := monEngine(t, d, root)
	e2 := newEngine(t, zkServer.Servers(), root)

	release(t, acquire(t, e1, "RM-idle-first", lock.Foreground, lock.AcquireOptions{}))
	waitFor(t, 15*time.Second, "e1's monitor idle again (its timer fired)", func() bool {
		mi, _, n, ok := lock.ReviewMonFlags(e1)
		return ok && mi && n == 0
	})
	time.Sleep(500 * time.Millisecond)

	gx := acquire(t, e2, "RM-idle-x", lock.Foreground, lock.AcquireOptions{})
	waited := make(chan error, 1)
	go func() {
		g, err := e1.Acquire(context.Background(), "RM-idle-x", lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
		if err == nil {
			_ = g.Release(context.Background())
		}
		waited <- err
	}()
	waitFor(t, 10*time.Second, "e1 queued for RM-idle-x", func() bool {
		st, err := e2.Inspect(context.Background(), "RM-idle-x")
		return err == nil && len(st.Waiters) == 1
	})
	waitFor(t, 5*time.Second, "e1's monitor idle and its keeper busy", func() bool {
		mi, ki, n, ok := lock.ReviewMonFlags(e1)
		return ok && mi && !ki && n == 0
	})

	g := acquire(t, e1, "RM-idle-held", lock.Foreground, lock.AcquireOptions{})
	monStallExpectLost(t, d, root, g, 4*time.Second)

	release(t, gx)
	t.Logf("e1's wait for RM-idle-x: %v", <-waited)
}

// Scenario 1: the monitor armed from earlier grants (acquire/release back
// to back for longer than the deadline is ahead, so its timer fires and is
// set again while cycles run, with no wake from the base moving), then a
// grant held and the leader path stalled: the timer, set for an earlier
// deadline, must fire, look again, and tell the holder by the deadline.
func TestReviewMonArmedMonitorAfterCycles(t *testing.T) {
	t.Parallel()
	root := testRoot(t, zkServer)
	d := &monDialer{}
	e1 := monEngine(t, d, root)
	cycles := 0
	for start := time.Now(); time.Since(start) < 5*time.Second; cycles++ {
		release(t, acquire(t, e1, "RM-cycle", lock.Foreground, lock.AcquireOptions{}))
	}
	g := acquire(t, e1, "RM-cycle-held", lock.Foreground, lock.AcquireOptions{})
	mi, ki, n, _ := lock.ReviewMonFlags(e1)
	t.Logf("%d cycles; at the hold: monitorIdle %v keeperIdle %v grants %d", cycles, mi, ki, n)
	monStallExpectLost(t, d, root, g, 4*time.Second)
}

// The same with W1-like cycles still running on another object while the
// held grant's leader path stalls (they stall with it): the monitor armed
// by a cycle's grant, every later grant registered while it is armed.
func TestReviewMonArmedMonitorCyclesIntoStall(t *testing.T) {
	t.Parallel()
	root := testRoot(t, zkServer)
	d := &monDialer{}
	e1 := monEngine(t, d, root)
	g := acquire(t, e1, "RM-into-held", lock.Foreground, lock.AcquireOptions{})
	release(t, g) // the monitor armed, the keeper quiet: writes flow
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var cycles atomic.Int64
	wg.Go(func() {
		for ctx.Err() == nil {
			c, err := e1.Acquire(ctx, "RM-into-cycle", lock.Foreground, lock.AcquireOptions{Wait: 10 * time.Second})
			if err != nil {
				return // the stall's loss, or the end
			}
			cycles.Add(1)
			rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = c.Release(rctx)
			rcancel()
		}
	})
	time.Sleep(2 * time.Second)
	g = acquire(t, e1, "RM-into-held", lock.Foreground, lock.AcquireOptions{})
	time.Sleep(500 * time.Millisecond)
	t.Logf("%d cycles before the stall", cycles.Load())
	monStallExpectLost(t, d, root, g, 4*time.Second)
	cancel()
	wg.Wait()
}

// Scenario 3: the keeper idle (no grant, no waiter) while the monitor is
// still armed from a grant just released: a grant then must wake the
// keeper (keeperIdle), which must keep sending syncs so that the held
// grant stays valid, with nothing else written, across several session
// timeouts of a healthy ZooKeeper.
func TestReviewMonGrantWakesIdleKeeper(t *testing.T) {
	t.Parallel()
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.AuditInterval = -1 })
	var g *lock.Grant
	for attempt := 1; g == nil; attempt++ {
		release(t, acquire(t, e, "RM-keep-first", lock.Foreground, lock.AcquireOptions{}))
		waitFor(t, 10*time.Second, "the keeper idle", func() bool {
			_, ki, n, ok := lock.ReviewMonFlags(e)
			return ok && ki && n == 0
		})
		if mi, _, _, _ := lock.ReviewMonFlags(e); mi {
			// the monitor's timer fired first: the grant would wake both
			if attempt == 5 {
				t.Fatal("the monitor never stayed armed until the keeper was idle")
			}
			continue
		}
		g = acquire(t, e, "RM-keep-held", lock.Foreground, lock.AcquireOptions{})
	}
	syncs0, valid0 := e.Health().Syncs, g.ValidUntil()
	const hold = 12 * time.Second // three session timeouts
	for start := time.Now(); time.Since(start) < hold; {
		select {
		case <-g.Done():
			t.Fatalf("held grant lost %v into the hold: %v (keeper syncs %d)",
				time.Since(start).Round(time.Millisecond), g.Err(), e.Health().Syncs-syncs0)
		case <-time.After(100 * time.Millisecond):
		}
	}
	syncs, moved := e.Health().Syncs-syncs0, g.ValidUntil().Sub(valid0)
	t.Logf("held %v: %d keeper syncs, validity moved %v", hold, syncs, moved.Round(time.Millisecond))
	if syncs == 0 {
		t.Errorf("no keeper sync while holding for %v", hold)
	}
	if moved < hold-2*time.Second {
		t.Errorf("validity moved %v in %v of holding", moved, hold)
	}
	release(t, g)
}

// Scenario 4: a reconnect on which the server seems to shorten the session
// timeout, while a grant is held and the monitor armed for the longer
// deadline. The commit's argument (the deadline only moves later within a
// session) rests on such a reconnect failing the session: the holder must
// be told lost at the reconnect, before the shorter deadline.
func TestReviewMonReconnectShrinkLoses(t *testing.T) {
	t.Parallel()
	root := testRoot(t, zkServer)
	d := &monDialer{}
	e := monEngine(t, d, root)
	g := acquire(t, e, "RM-shrink", lock.Foreground, lock.AcquireOptions{})
	time.Sleep(300 * time.Millisecond)
	told := g.ValidUntil()
	d.shrinkTo.Store(1000)
	cutAt := time.Now()
	d.cut()
	select {
	case <-g.Done():
	case <-time.After(8 * time.Second):
		d.mu.Lock()
		at := d.shrunkAt
		d.mu.Unlock()
		if at.IsZero() || at.Add(time.Second).After(told) {
			// connect sent + 1 s (less the margin) no earlier than the
			// deadline told: the deadline did not move earlier, and the
			// session rightly stays
			t.Skipf("the reconnect came at cut+%v, too late for a 1 s timeout to shorten the deadline (cut+%v)",
				at.Sub(cutAt).Round(time.Millisecond), told.Sub(cutAt).Round(time.Millisecond))
		}
		t.Fatalf("the grant survived a reconnect (at cut+%v) that shortened the session timeout to 1s (told valid until cut+%v, now %v)",
			at.Sub(cutAt).Round(time.Millisecond), told.Sub(cutAt).Round(time.Millisecond), g.ValidUntil().Sub(cutAt).Round(time.Millisecond))
	}
	lostAt := time.Now()
	t.Logf("told valid until cut+%v; lost at cut+%v: %v", told.Sub(cutAt).Round(time.Millisecond), lostAt.Sub(cutAt).Round(time.Millisecond), g.Err())
	if lostAt.After(told.Add(monLossTolerance)) {
		t.Errorf("lost %v after the valid_until told", lostAt.Sub(told))
	}
}

// monHeld is a grant whose holder must be told, by its latest valid_until,
// that it is lost once ZooKeeper stalls.
type monHeld struct {
	name string
	g    *lock.Grant
	v    *told
}

// The scenarios above with ZooKeeper itself stopped (SIGSTOP): a real
// stall, where go-zookeeper also sees the connection die, after 2/3 of the
// session timeout with no answer, and that state change wakes the monitor
// whatever it was waiting for. So the engines here declare a tickTime of
// 2 s (the server's is 500 ms; a longer one only makes the engine count
// validity more cautiously): the deadline, about 2 s behind the last
// answer, then comes before go-zookeeper's 2.67 s, and only the monitor's
// own wake tells the holder in time.
//   - cyc: the monitor armed by acquire/release cycles (scenario 1);
//   - idle: the monitor idle since the session began, the keeper busy
//     with a slow-path wait (scenario 2).
func TestReviewMonStoppedServer(t *testing.T) {
	t.Parallel()
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{})
	root := testRoot(t, z)
	slowTick := func(o *lock.Options) { o.TickTime = 2 * time.Second; o.AuditInterval = -1 }
	cyc := newEngine(t, z.Servers(), root, slowTick)
	idle := newEngine(t, z.Servers(), root, slowTick)
	other := newEngine(t, z.Servers(), root, slowTick)

	gx := acquire(t, other, "RM-stop-x", lock.Foreground, lock.AcquireOptions{})
	waited := make(chan error, 1)
	go func() {
		g, err := idle.Acquire(context.Background(), "RM-stop-x", lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
		if err == nil {
			_ = g.Release(context.Background())
		}
		waited <- err
	}()
	waitFor(t, 10*time.Second, "idle queued for RM-stop-x", func() bool {
		st, err := other.Inspect(context.Background(), "RM-stop-x")
		return err == nil && len(st.Waiters) == 1
	})
	cycles := 0
	for start := time.Now(); time.Since(start) < 5*time.Second; cycles++ {
		release(t, acquire(t, cyc, "RM-stop-cycle", lock.Foreground, lock.AcquireOptions{}))
	}
	waitFor(t, 5*time.Second, "idle's monitor idle and its keeper busy", func() bool {
		mi, ki, n, ok := lock.ReviewMonFlags(idle)
		return ok && mi && !ki && n == 0
	})
	held := []*monHeld{
		{name: "idle", g: acquire(t, idle, "RM-stop-idle", lock.Foreground, lock.AcquireOptions{})},
		{name: "cyc", g: acquire(t, cyc, "RM-stop-held", lock.Foreground, lock.AcquireOptions{})},
	}
	stop := make(chan struct{})
	for _, h := range held {
		h.v = monFollowValidity(h.g, stop)
	}
	time.Sleep(20 * time.Millisecond)
	if err := z.Pause(1); err != nil {
		t.Fatal(err)
	}
	stallAt := time.Now()
	type lostAt struct {
		name string
		at   time.Time
	}
	losses := make(chan lostAt, len(held))
	for _, h := range held {
		go func() {
			select {
			case <-h.g.Done():
				losses <- lostAt{h.name, time.Now()}
			case <-time.After(10 * time.Second):
				losses <- lostAt{h.name, time.Time{}}
			}
		}()
	}
	at := map[string]time.Time{}
	for range held {
		l := <-losses
		at[l.name] = l.at
	}
	if err := z.Resume(1); err != nil {
		t.Fatal(err)
	}
	close(stop)
	for _, h := range held {
		told := h.v.max()
		if at[h.name].IsZero() {
			t.Errorf("%s: never told lost (told valid until stall+%v)", h.name, told.Sub(stallAt).Round(time.Millisecond))
			_ = h.g.Release(context.Background())
			continue
		}
		t.Logf("%s: told valid until stall+%v, lost at stall+%v: %v", h.name, told.Sub(stallAt).Round(time.Millisecond),
			at[h.name].Sub(stallAt).Round(time.Millisecond), h.g.Err())
		if late := at[h.name].Sub(told); late > monLossTolerance {
			t.Errorf("%s: told lost %v after the latest valid_until it was told (tolerance %v)", h.name, late, monLossTolerance)
		}
	}
	t.Logf("%d cycles; the wait on the stopped server: %v", cycles, <-waited)
	_ = gx.Release(context.Background()) // lost with the stall too, most likely
}

// Scenario 4: a reconnect within the session while a grant is held (the
// monitor armed; the handshake moves the base), then a stall: the holder is
// told by the deadline. Then the session that replaces the lost one (its
// own monitor and keeper, their flags fresh): a grant on it, a stall, the
// same.
func TestReviewMonReconnectThenReplaced(t *testing.T) {
	t.Parallel()
	root := testRoot(t, zkServer)
	d := &monDialer{}
	e := monEngine(t, d, root)
	g := acquire(t, e, "RM-recon", lock.Foreground, lock.AcquireOptions{})
	sid, dials := e.Health().SessionID, d.dials()
	d.cut()
	waitFor(t, 10*time.Second, "reconnected in the same session", func() bool {
		h := e.Health()
		return d.dials() > dials && h.Connected && h.SessionID == sid
	})
	if g.Err() != nil {
		t.Fatalf("the grant was lost by a quick reconnect: %v", g.Err())
	}
	time.Sleep(300 * time.Millisecond)
	monStallExpectLost(t, d, root, g, 4*time.Second)

	waitFor(t, 10*time.Second, "a new session", func() bool {
		h := e.Health()
		return h.Connected && h.SessionID != sid && h.SessionID != 0
	})
	g2 := acquire(t, e, "RM-recon-2", lock.Foreground, lock.AcquireOptions{})
	time.Sleep(300 * time.Millisecond)
	monStallExpectLost(t, d, root, g2, 4*time.Second)
}

// Scenario 3, the keeper's quiet wait: while the session's own writes flow
// the keeper skips its syncs (it sleeps until an interval after the newest
// write, woken by nothing), and grants come and go meanwhile without a
// wake (it is not idle). When the writes stop with a grant still held, the
// keeper must take up its syncs again by itself, so that the grant stays
// valid across several session timeouts of a healthy ZooKeeper.
func TestReviewMonKeeperQuietThenHold(t *testing.T) {
	t.Parallel()
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.AuditInterval = -1 })
	g := acquire(t, e, "RM-quiet-held", lock.Foreground, lock.AcquireOptions{})
	quiet0 := e.KeeperQuiet()
	for start := time.Now(); time.Since(start) < 2*time.Second; {
		release(t, acquire(t, e, "RM-quiet-cycle", lock.Foreground, lock.AcquireOptions{}))
	}
	if e.KeeperQuiet() == quiet0 {
		t.Logf("the keeper was never quiet during the cycles (a slow machine): the hold still must stay valid")
	}
	syncs0, valid0 := e.Health().Syncs, g.ValidUntil()
	const hold = 12 * time.Second // three session timeouts
	for start := time.Now(); time.Since(start) < hold; {
		select {
		case <-g.Done():
			t.Fatalf("held grant lost %v after the writes stopped: %v (keeper syncs since %d)",
				time.Since(start).Round(time.Millisecond), g.Err(), e.Health().Syncs-syncs0)
		case <-time.After(100 * time.Millisecond):
		}
	}
	syncs, moved := e.Health().Syncs-syncs0, g.ValidUntil().Sub(valid0)
	t.Logf("%d quiet intervals during the cycles; then held %v: %d keeper syncs, validity moved %v",
		e.KeeperQuiet()-quiet0, hold, syncs, moved.Round(time.Millisecond))
	if moved < hold-2*time.Second {
		t.Errorf("validity moved %v in %v of holding", moved, hold)
	}
	release(t, g)
}
