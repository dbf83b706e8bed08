package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/testenv"
)

// told follows a grant's ValidUntil, as a sidecar reports it, and keeps the
// latest instant ever told; it stops when the grant ends.
type told struct {
	mu     sync.Mutex
	latest time.Time
	done   chan struct{}
}

func followValidity(g *lock.Grant) *told { return followValidityEvery(g, nil, 5*time.Millisecond) }

// followValidityEvery follows g's ValidUntil every period until g ends or
// stop closes, keeping the latest instant told.
func followValidityEvery(g *lock.Grant, stop <-chan struct{}, period time.Duration) *told {
	v := &told{done: make(chan struct{})}
	go func() {
		defer close(v.done)
		for {
			u := g.ValidUntil()
			v.mu.Lock()
			if u.After(v.latest) {
				v.latest = u
			}
			v.mu.Unlock()
			select {
			case <-g.Done():
				return
			case <-stop:
				return
			case <-time.After(period):
			}
		}
	}()
	return v
}

func (v *told) max() time.Time {
	<-v.done
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.latest
}

// iptablesCut drops every TCP packet from or to the given local ports (on
// loopback, both directions of a connection pass OUTPUT) in a chain of its
// own, removed when the test ends.
type iptablesCut struct {
	t     *testing.T
	chain string
}

func newIptablesCut(t *testing.T) *iptablesCut {
	t.Helper()
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("iptables is not installed (make deps installs it): the partition cannot be made")
	}
	c := &iptablesCut{t: t, chain: fmt.Sprintf("BATON_T%d", os.Getpid())}
	c.run("-N", c.chain)
	c.run("-I", "OUTPUT", "-j", c.chain)
	t.Cleanup(func() {
		_ = iptables("-D", "OUTPUT", "-j", c.chain).Run()
		_ = iptables("-F", c.chain).Run()
		_ = iptables("-X", c.chain).Run()
	})
	return c
}

// iptables is the command with -w: it waits for the xtables lock (the
// legacy backend's) that another process changing rules holds, such as
// another shard of make test's (.ci/gotest.sh) cutting at the same time,
// instead of failing at once.
func iptables(args ...string) *exec.Cmd {
	return exec.Command("iptables", append([]string{"-w"}, args...)...)
}

func (c *iptablesCut) run(args ...string) {
	c.t.Helper()
	if out, err := iptables(args...).CombinedOutput(); err != nil {
		c.t.Fatalf("iptables %v: %v: %s", args, err, out)
	}
}

func (c *iptablesCut) dropPort(port int) {
	p := strconv.Itoa(port)
	c.run("-A", c.chain, "-p", "tcp", "--sport", p, "-j", "DROP")
	c.run("-A", c.chain, "-p", "tcp", "--dport", p, "-j", "DROP")
}

var ssLocalPort = regexp.MustCompile(`^\S+\s+\S+\s+(?:\[::ffff:)?127\.0\.0\.1\]?:(\d+)\s+(?:\[::ffff:)?127\.0\.0\.1\]?:(\d+)\s.*pid=(\d+),`)

// peerPorts lists the local ports of pid's established TCP connections other
// than those of its client port: its links to the other servers.
func peerPorts(t *testing.T, pid, clientPort int) []int {
	t.Helper()
	out, err := exec.Command("ss", "-tnpH", "state", "established").Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	var ports []int
	for _, line := range strings.Split(string(out), "\n") {
		m := ssLocalPort.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		local, _ := strconv.Atoi(m[1])
		p, _ := strconv.Atoi(m[3])
		if p == pid && local != clientPort {
			ports = append(ports, local)
		}
	}
	return ports
}

// Issue 8.1. A follower cut off from its leader keeps answering its clients'
// pings (for syncLimit x tickTime, 10 s here) while the leader expires their
// sessions (2 s). The holder connected to that follower must stop counting
// validity at the cut, be told "lost", and never have been told a
// valid_until that reaches the other engine's grant.
func TestPartitionedFollowerStopsValidity(t *testing.T) {
	partitionedFollower(t, "NP1", 300*time.Millisecond, nil)
}

// partitionedFollower runs issue 8.1's scenario on obj: e1, connected to a
// follower, holds obj; e2, on the leader, waits for it; after settle the
// follower is cut from its peers. e1 must be told lost, and never told a
// valid_until, that reaches e2's grant. busy, if set, starts work on e1
// right after its grant and returns what to log, read just before the cut.
func partitionedFollower(t *testing.T, obj string, settle time.Duration, busy func(e1 *lock.Engine, g1 *lock.Grant) func() string) {
	t.Helper()
	if testing.Short() {
		t.Skip("ensemble")
	}
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{Nodes: 3, ExtraConfig: []string{"syncLimit=20"}})
	cut := newIptablesCut(t)
	leader, err := z.Leader()
	if err != nil {
		t.Fatal(err)
	}
	follower := leader%3 + 1
	root := testRoot(t, z)
	short := func(o *lock.Options) { o.SessionTimeout = 2 * time.Second }
	e1 := newEngine(t, []string{z.Addr(follower)}, root, short)
	e2 := newEngine(t, []string{z.Addr(leader)}, root, short)

	var check overlapChecker
	g1 := acquire(t, e1, obj, lock.Foreground, lock.AcquireOptions{})
	check.enter(g1.Token())
	v1 := followValidity(g1)
	note := func() string { return "" }
	if busy != nil {
		note = busy(e1, g1)
	}
	lostAt := make(chan time.Time, 1)
	go func() { <-g1.Done(); check.leave(); lostAt <- time.Now() }()
	type res struct {
		g  *lock.Grant
		at time.Time
	}
	granted := make(chan res, 1)
	go func() {
		g, err := e2.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
		if err != nil {
			t.Errorf("e2 Acquire: %v", err)
			close(granted)
			return
		}
		check.enter(g.Token())
		granted <- res{g, time.Now()}
	}()
	waitFor(t, 10*time.Second, "e2 queued", func() bool {
		st, err := e2.Inspect(context.Background(), obj)
		return err == nil && len(st.Waiters) == 1
	})
	time.Sleep(settle) // validity in steady state
	noted := note()

	// Cut the follower from its peers: its listening peer ports and every
	// link it holds to the other servers.
	q, el := z.PeerPorts(follower)
	fPort, _ := strconv.Atoi(z.Addr(follower)[strings.LastIndex(z.Addr(follower), ":")+1:])
	links := peerPorts(t, z.PID(follower), fPort)
	if len(links) == 0 {
		t.Fatal("found no peer links of the follower")
	}
	for _, p := range append([]int{q, el}, links...) {
		cut.dropPort(p)
	}
	cutAt := time.Now()

	r, ok := <-granted
	if !ok {
		t.FailNow()
	}
	defer func() { check.leave(); _ = r.g.Release(context.Background()) }()
	tLost := <-lostAt
	maxTold := v1.max()
	t.Logf("cut%s; e1 told valid until cut+%v, lost at cut+%v; e2 granted at cut+%v", noted,
		maxTold.Sub(cutAt).Round(time.Millisecond), tLost.Sub(cutAt).Round(time.Millisecond), r.at.Sub(cutAt).Round(time.Millisecond))
	if !tLost.Before(r.at) {
		t.Errorf("e1 was told lost %v after e2's grant", tLost.Sub(r.at))
	}
	if !maxTold.Before(r.at) {
		t.Errorf("e1 was told valid until %v after e2's grant", maxTold.Sub(r.at))
	}
	if check.overlaps != 0 || check.badToken != 0 {
		t.Errorf("overlaps %d, non-increasing tokens %d", check.overlaps, check.badToken)
	}
}

// Issue 8.2, lost release reply: e1's release multi is applied but its reply
// lost; e2 (background) is granted; e3 (foreground) queues first and watches
// privateLock; e1 reconnects in the same session and retries its release.
// The retry must not delete e2's privateLock.
func TestLostReleaseReplyKeepsNextHolder(t *testing.T) {
	root := testRoot(t, zkServer)
	d := newCutDialer()
	e1 := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.Dialer = d.dial })
	e2 := newEngine(t, zkServer.Servers(), root)
	e3 := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())
	var check overlapChecker

	g1 := acquire(t, e1, "LR1", lock.Background, lock.AcquireOptions{})
	sess1 := e1.Health().SessionID
	g2ch := make(chan *lock.Grant, 1)
	go func() {
		g, err := e2.Acquire(context.Background(), "LR1", lock.Background, lock.AcquireOptions{Wait: 20 * time.Second})
		if err != nil {
			t.Errorf("e2: %v", err)
			close(g2ch)
			return
		}
		check.enter(g.Token())
		g2ch <- g
	}()
	waitFor(t, 10*time.Second, "e2 queued", func() bool { return len(children(t, conn, root, "LR1")) == 3 })

	cutDone := d.arm(opMulti, 1500*time.Millisecond)
	if err := g1.Release(context.Background()); err != nil {
		t.Fatalf("e1 Release: %v", err)
	}
	<-cutDone
	g2, ok := <-g2ch
	if !ok {
		t.FailNow()
	}
	g3ch := make(chan *lock.Grant, 1)
	go func() {
		g, err := e3.Acquire(context.Background(), "LR1", lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
		if err != nil {
			t.Errorf("e3: %v", err)
			close(g3ch)
			return
		}
		check.enter(g.Token())
		g3ch <- g
	}()
	waitFor(t, 10*time.Second, "e3 queued", func() bool { return len(children(t, conn, root, "LR1")) == 3 })
	// e1 reconnects (same session) and its cleaner runs.
	waitFor(t, 10*time.Second, "e1 reconnected", func() bool { return e1.Health().Connected })
	if got := e1.Health().SessionID; got != sess1 {
		t.Fatalf("e1 got a new session 0x%x; the scenario needs the old one resumed", got)
	}
	waitFor(t, 10*time.Second, "e1 cleanups done", func() bool { return e1.Health().CleanupPending == 0 })
	time.Sleep(300 * time.Millisecond)
	name, _ := lock.EscapeObject("LR1")
	_, st, err := conn.Get(path.Join(root, name, "privateLock"))
	if err != nil || st.Czxid != g2.Token() {
		t.Errorf("e2's privateLock after e1's retried release: err %v, czxid %v, want token %d", err, st, g2.Token())
	}
	select {
	case <-g3ch:
		t.Errorf("e3 was granted while e2 holds")
	default:
	}
	check.leave()
	release(t, g2)
	if g3, ok := <-g3ch; ok {
		check.leave()
		release(t, g3)
	}
	if check.overlaps != 0 || check.badToken != 0 {
		t.Errorf("overlaps %d, non-increasing tokens %d", check.overlaps, check.badToken)
	}
}

// Issue 8.2, foreign deletion: the holder's privateLock is deleted by someone
// else and a foreground waiter takes the lock; the old holder releases before
// its watch fires. The release must not delete the new holder's privateLock.
func TestReleaseAfterForeignDeletion(t *testing.T) {
	root := testRoot(t, zkServer)
	noWatch := func(o *lock.Options) { o.HolderWatchDelay = time.Hour }
	e1 := newEngine(t, zkServer.Servers(), root, noWatch)
	e2 := newEngine(t, zkServer.Servers(), root, noWatch)
	conn := rawConn(t, zkServer.Servers())
	g1 := acquire(t, e1, "FD1", lock.Background, lock.AcquireOptions{})
	g2ch := make(chan *lock.Grant, 1)
	go func() {
		g, err := e2.Acquire(context.Background(), "FD1", lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
		if err != nil {
			t.Errorf("e2: %v", err)
			close(g2ch)
			return
		}
		g2ch <- g
	}()
	waitFor(t, 10*time.Second, "e2 queued", func() bool { return len(children(t, conn, root, "FD1")) == 3 })
	name, _ := lock.EscapeObject("FD1")
	pl := path.Join(root, name, "privateLock")
	if err := conn.Delete(pl, -1); err != nil {
		t.Fatal(err)
	}
	g2, ok := <-g2ch
	if !ok {
		t.FailNow()
	}
	err := g1.Release(context.Background())
	if !errors.Is(err, lock.ErrLockLost) {
		t.Errorf("old holder's Release = %v, want ErrLockLost", err)
	}
	_, st, gerr := conn.Get(pl)
	if gerr != nil || st.Czxid != g2.Token() {
		t.Fatalf("new holder's privateLock after the old holder's release: err %v, stat %v, want czxid %d", gerr, st, g2.Token())
	}
	release(t, g2)
}

// Issue 8.3: the connection drops with a create in flight (applied, reply
// lost) and reconnecting outlasts the wait. The acquire fails, and the
// session (which lives on) must delete what the request created: no bare
// privateLock, no orphan child first in the queue.
func TestHalfCreatedNodesDeletedAfterLongReconnect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		op      int32
		tweak   func(*lock.Options)
		prepare func(t *testing.T, e *lock.Engine, conn *zk.Conn, root, obj string)
	}{
		{"fast-path multi", opMulti, nil, func(t *testing.T, e *lock.Engine, _ *zk.Conn, _, obj string) {
			release(t, acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})) // anchors the prediction
		}},
		{"privateLock multi", opMulti, func(o *lock.Options) { o.DisableFastPath = true }, nil},
		{"child create", opCreate, func(o *lock.Options) { o.DisableFastPath = true; o.ObjectNode = lock.Persistent },
			func(t *testing.T, _ *lock.Engine, conn *zk.Conn, root, obj string) {
				name, _ := lock.EscapeObject(obj)
				for _, p := range []string{"/t", root, path.Join(root, name)} {
					if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
						t.Fatal(err)
					}
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := testRoot(t, zkServer)
			d := newCutDialer()
			e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) {
				o.Dialer = d.dial
				if tc.tweak != nil {
					tc.tweak(o)
				}
			})
			conn := rawConn(t, zkServer.Servers())
			obj := "HC-" + strings.ReplaceAll(tc.name, " ", "-")
			if tc.prepare != nil {
				tc.prepare(t, e, conn, root, obj)
			}
			sess := e.Health().SessionID
			cutDone := d.arm(tc.op, 2*time.Second)
			_, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: time.Second})
			select {
			case <-cutDone:
			default:
				t.Fatalf("the request was never cut (Acquire: %v)", err)
			}
			if err == nil {
				t.Fatal("Acquire succeeded across the cut")
			}
			t.Logf("Acquire: %v; left in ZooKeeper right after: %v", err, children(t, conn, root, obj))
			waitFor(t, 15*time.Second, "engine reconnected", func() bool { return e.Health().Connected })
			if got := e.Health().SessionID; got != sess {
				t.Fatalf("new session 0x%x: the scenario needs the old one resumed", got)
			}
			waitFor(t, 10*time.Second, "no node of the failed request left", func() bool {
				return len(children(t, conn, root, obj)) == 0
			})
			other := newEngine(t, zkServer.Servers(), root)
			g, err := other.Acquire(context.Background(), obj, lock.Background, lock.AcquireOptions{Wait: 3 * time.Second})
			if err != nil {
				t.Fatalf("another engine cannot take the object: %v", err)
			}
			release(t, g)
		})
	}
}

// Issue 8.4: persistent object nodes (the mixed-fleet mode) must not
// accumulate server-side watches with nothing held.
func TestPersistentObjectsLeaveNoWatches(t *testing.T) {
	t.Parallel()
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{})
	root := testRoot(t, z)
	e := newEngine(t, z.Servers(), root, func(o *lock.Options) { o.ObjectNode = lock.Persistent })
	watches := func() int {
		m, err := z.Mntr(1)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(m["zk_watch_count"])
		return n
	}
	before := watches()
	for i := range 300 {
		obj := fmt.Sprintf("W-%d", i)
		release(t, acquire(t, e, obj, lock.Background, lock.AcquireOptions{}))
		release(t, acquire(t, e, obj, lock.Background, lock.AcquireOptions{})) // fast path
	}
	time.Sleep(200 * time.Millisecond)
	if after := watches(); after-before > 5 {
		t.Errorf("zk_watch_count %d → %d after 600 cycles on 300 objects with nothing held", before, after)
	}
}

// Issue 8.4: Release with a context already done still releases (later, by
// the session), instead of sending nothing and leaving the object locked.
func TestReleaseWithDoneContext(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())
	g := acquire(t, e, "RD1", lock.Foreground, lock.AcquireOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Release(ctx); err != nil {
		t.Fatalf("Release(done ctx) = %v", err)
	}
	waitFor(t, 5*time.Second, "nodes deleted", func() bool { return len(children(t, conn, root, "RD1")) == 0 })
}

// Issue 15.9: a grant released while the next holder already waits is never
// reported lost afterwards (the holder watch used to see the next holder's
// privateLock and call it a loss).
func TestNoLossReportedAfterOwnRelease(t *testing.T) {
	root := testRoot(t, zkServer)
	now := func(o *lock.Options) { o.HolderWatchDelay = -1 }
	e1 := newEngine(t, zkServer.Servers(), root, now)
	e2 := newEngine(t, zkServer.Servers(), root, now)
	conn := rawConn(t, zkServer.Servers())
	for i := range 40 {
		g := acquire(t, e1, "NL1", lock.Foreground, lock.AcquireOptions{})
		got := make(chan *lock.Grant, 1)
		go func() {
			g, err := e2.Acquire(context.Background(), "NL1", lock.Foreground, lock.AcquireOptions{Wait: 10 * time.Second})
			if err != nil {
				t.Error(err)
			}
			got <- g
		}()
		waitFor(t, 5*time.Second, "e2 queued", func() bool { return len(children(t, conn, root, "NL1")) == 3 })
		time.Sleep(5 * time.Millisecond) // the holder watch is armed
		release(t, g)
		g2 := <-got
		if g2 == nil {
			t.FailNow()
		}
		time.Sleep(20 * time.Millisecond)
		if g.State() != lock.Released || g.Err() != nil {
			t.Fatalf("cycle %d: after its own release the grant is %v (%v)", i, g.State(), g.Err())
		}
		release(t, g2)
	}
}

// Issue 15.9: a session given up locally while disconnected is closed once
// it reconnects, so the server drops its nodes then, instead of keeping them
// (and the objects locked) until it expires the session.
func TestAbandonedSessionClosedOnReconnect(t *testing.T) {
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{})
	root := testRoot(t, z)
	d := newCutDialer()
	e := newEngine(t, z.Servers(), root, func(o *lock.Options) {
		o.Dialer = d.dial
		o.TickTime = 2 * time.Second // conservative: the local loss comes well before the server's expiry
	})
	g := acquire(t, e, "AS1", lock.Foreground, lock.AcquireOptions{})
	sess := e.Health().SessionID
	<-d.arm(opPing, time.Minute) // disconnected, and every reconnect refused
	cutAt := time.Now()
	select {
	case <-g.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("grant not lost while disconnected")
	}
	t.Logf("lost %v after the cut, while disconnected", time.Since(cutAt).Round(time.Millisecond))
	d.heal()
	conn := rawConn(t, z.Servers())
	waitFor(t, 10*time.Second, "old session's nodes gone", func() bool { return len(children(t, conn, root, "AS1")) == 0 })
	t.Logf("nodes gone %v after the cut (session timeout 4s)", time.Since(cutAt).Round(time.Millisecond))
	log, err := os.ReadFile(path.Join(z.Dir(), "node1", "zookeeper.log"))
	if err != nil {
		t.Fatal(err)
	}
	if id := fmt.Sprintf("0x%x", sess); strings.Contains(string(log), "Expiring session "+id) {
		t.Errorf("session %s was left to expire on the server instead of being closed", id)
	}
}

// The keeper's cost: syncs only while something is held or waited for.
func TestKeeperSyncsOnlyWhileBusy(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root)
	idle := e.Health().Syncs
	time.Sleep(time.Second)
	if n := e.Health().Syncs - idle; n != 0 {
		t.Errorf("idle session sent %d syncs in 1s", n)
	}
	g := acquire(t, e, "KC1", lock.Foreground, lock.AcquireOptions{})
	before, start := e.Health().Syncs, time.Now()
	time.Sleep(2 * time.Second)
	n := e.Health().Syncs - before
	rate := float64(n) / time.Since(start).Seconds()
	t.Logf("holding: %.1f syncs/s (session 4s, tickTime 500ms); valid for %v", rate, time.Until(g.ValidUntil()).Round(time.Millisecond))
	if n == 0 {
		t.Error("no sync while holding: validity would run out")
	}
	release(t, g)
}

// Issue 21 §4: while the session's own acquires and releases reach the
// leader at least once per keeper interval, the keeper sends no sync (it
// skips intervals instead), and a grant held meanwhile still sees its
// validity move: the writes' acknowledgements move the base.
func TestKeeperQuietWhileWritesFlow(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root)
	g := acquire(t, e, "KQ-hold", lock.Foreground, lock.AcquireOptions{})
	defer release(t, g)
	valid0, syncs0, quiet0 := g.ValidUntil(), e.Health().Syncs, e.KeeperQuiet()
	cycles := 0
	for start := time.Now(); time.Since(start) < 2*time.Second; cycles++ {
		release(t, acquire(t, e, "KQ-cycle", lock.Foreground, lock.AcquireOptions{}))
	}
	syncs, quiet := e.Health().Syncs-syncs0, e.KeeperQuiet()-quiet0
	t.Logf("%d acquire/release cycles in 2s: %d syncs, %d quiet intervals", cycles, syncs, quiet)
	if quiet == 0 {
		t.Errorf("the keeper never stayed quiet during %d write cycles (%d syncs)", cycles, syncs)
	}
	if syncs > quiet {
		t.Errorf("%d syncs but only %d quiet intervals during %d write cycles: the keeper kept syncing", syncs, quiet, cycles)
	}
	if moved := g.ValidUntil().Sub(valid0); moved < time.Second {
		t.Errorf("validity moved %v in 2s of writes, want ≥ 1s: writes did not move the base", moved)
	}
}

// Issue 10, create-then-verify: a request that creates privateLock without a
// prediction is granted only if no child sorts ahead of its own when it
// lists. Here a foreground node (a plugin client's, waiting, not yet holding)
// sorts ahead of a background request: the request must give privateLock
// back and wait, never be granted ahead of it; once the foreground node goes,
// it is granted.
func TestVerifyNeverGrantsAheadOfWaiter(t *testing.T) {
	t.Parallel()
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())
	for i := range 20 {
		obj := fmt.Sprintf("V-%d", i)
		name, _ := lock.EscapeObject(obj)
		objPath := path.Join(root, name)
		for _, p := range []string{"/t", root, objPath} {
			if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				t.Fatal(err)
			}
		}
		fg, err := conn.Create(objPath+"/A-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.Acquire(context.Background(), obj, lock.Background, lock.AcquireOptions{Wait: 300 * time.Millisecond})
		var ile *lock.InstanceLockError
		if !errors.As(err, &ile) {
			t.Fatalf("%s: background acquire behind a waiting foreground node = %v, want InstanceLockError", obj, err)
		}
		if _, _, err := conn.Get(objPath + "/privateLock"); !errors.Is(err, zk.ErrNoNode) {
			t.Fatalf("%s: privateLock left behind after the verify: %v", obj, err)
		}
		if err := conn.Delete(fg, -1); err != nil {
			t.Fatal(err)
		}
		release(t, acquire(t, e, obj, lock.Background, lock.AcquireOptions{}))
		if err := conn.Delete(objPath, -1); err != nil {
			t.Fatal(err)
		}
	}
}

// Engine.Signal: any engine can write a signal into the holder's
// privateLock; the holder's engine delivers it (through the holder watch) and
// the grant still releases cleanly afterwards. A plugin holder is refused,
// no holder is ErrNoNode.
func TestSignalReachesHolder(t *testing.T) {
	root := testRoot(t, zkServer)
	e1 := newEngine(t, zkServer.Servers(), root)
	e2 := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())
	got := make(chan lock.Signal, 4)
	g := acquire(t, e1, "SG1", lock.Background, lock.AcquireOptions{OnSignal: func(s lock.Signal) { got <- s }})
	time.Sleep(50 * time.Millisecond) // the holder watch is armed
	sent := time.Now()
	h, err := e2.Signal(context.Background(), "SG1", 0, lock.Signal{Kind: "revoke", Reason: "stuck", Who: "uid=0"})
	if err != nil || h.Token != g.Token() || h.Name != g.Node() {
		t.Fatalf("Signal = %+v, %v; want the holder with token %d and node %s (issue 20: the node was empty)", h, err, g.Token(), g.Node())
	}
	select {
	case s := <-got:
		t.Logf("signal delivered %v after it was sent", time.Since(sent).Round(time.Millisecond))
		if s.Kind != "revoke" || s.Reason != "stuck" || s.From == "" {
			t.Errorf("delivered %+v", s)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("signal not delivered within 2s")
	}
	st, err := e2.Inspect(context.Background(), "SG1")
	if err != nil || st.Holder == nil || st.Holder.Signal == nil || st.Holder.Signal.Kind != "revoke" {
		t.Errorf("Inspect after the signal: %+v, %v", st, err)
	}
	if _, err := e2.Signal(context.Background(), "SG1", g.Token()+1, lock.Signal{Kind: "revoke"}); !errors.Is(err, lock.ErrNoNode) {
		t.Errorf("Signal with another token = %v, want ErrNoNode", err)
	}
	release(t, g)
	waitFor(t, 5*time.Second, "nodes deleted", func() bool { return len(children(t, conn, root, "SG1")) == 0 })
	if _, err := e2.Signal(context.Background(), "SG1", 0, lock.Signal{Kind: "revoke"}); !errors.Is(err, lock.ErrNoNode) {
		t.Errorf("Signal without a holder = %v, want ErrNoNode", err)
	}
	// A plugin holder: privateLock without Baton's data.
	p := &pluginLock{conn: conn, objPath: path.Join(root, "SG2")}
	if _, err := p.lock(context.Background(), "A"); err != nil {
		t.Fatal(err)
	}
	if _, err := e2.Signal(context.Background(), "SG2", 0, lock.Signal{Kind: "revoke"}); !errors.Is(err, lock.ErrNotSignallable) {
		t.Errorf("Signal to a plugin holder = %v, want ErrNotSignallable", err)
	}
	if err := p.unlock(); err != nil {
		t.Fatal(err)
	}
	_ = conn.Delete(path.Join(root, "SG2"), -1)
}

// Issue 10, the foreground shortcut (a foreground waiter first or second in
// line takes privateLock without listing again): a background waiter must
// not take it — a foreground node that arrives while it waits sorts ahead of
// it and is granted first.
func TestShortcutOnlyForForeground(t *testing.T) {
	root := testRoot(t, zkServer)
	e1 := newEngine(t, zkServer.Servers(), root)
	e2 := newEngine(t, zkServer.Servers(), root)
	e3 := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())
	for i := range 10 {
		obj := fmt.Sprintf("SC-%d", i)
		h := acquire(t, e1, obj, lock.Foreground, lock.AcquireOptions{})
		order := make(chan string, 2)
		var wg sync.WaitGroup
		take := func(e *lock.Engine, typ lock.Type, name string) {
			defer wg.Done()
			g, err := e.Acquire(context.Background(), obj, typ, lock.AcquireOptions{Wait: 10 * time.Second})
			if err != nil {
				t.Error(err)
				return
			}
			order <- name
			time.Sleep(5 * time.Millisecond)
			release(t, g)
		}
		wg.Add(1)
		go take(e2, lock.Background, "background") // second in line, watching the holder
		waitFor(t, 5*time.Second, "background queued", func() bool { return len(children(t, conn, root, obj)) == 3 })
		wg.Add(1)
		go take(e3, lock.Foreground, "foreground") // arrives later, sorts ahead of the background node
		waitFor(t, 5*time.Second, "foreground queued", func() bool { return len(children(t, conn, root, obj)) == 4 })
		release(t, h)
		wg.Wait()
		if first := <-order; first != "foreground" {
			t.Fatalf("%s: %s granted first, want the foreground request", obj, first)
		}
	}
}

// Issue 10: a foreground waiter second in line, cancelled at about the
// instant the holder releases, and a local and a remote waiter racing for
// the same handoff: never two holders, tokens increase, no node left.
func TestHandoffRaces(t *testing.T) {
	root := testRoot(t, zkServer)
	e1 := newEngine(t, zkServer.Servers(), root)
	e2 := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())
	var check overlapChecker
	hold := func(g *lock.Grant) {
		check.enter(g.Token())
		time.Sleep(time.Millisecond)
		check.leave()
		release(t, g)
	}
	for i := range 30 {
		obj := fmt.Sprintf("HR-%d", i%3)
		h := acquire(t, e1, obj, lock.Foreground, lock.AcquireOptions{})
		check.enter(h.Token())
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for j, e := range []*lock.Engine{e1, e2, e2} { // one local, two remote waiters
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := context.Background()
				if j == 1 {
					c = ctx // the second in line is cancelled at the handoff
				}
				g, err := e.Acquire(c, obj, lock.Foreground, lock.AcquireOptions{Wait: 10 * time.Second})
				var ile *lock.InstanceLockError
				switch {
				case err == nil:
					hold(g)
				case j == 1 && errors.As(err, &ile):
				default:
					t.Errorf("waiter %d: %v", j, err)
				}
			}()
			want := 2 + j
			waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(children(t, conn, root, obj)) >= want })
		}
		check.leave()
		go func() { time.Sleep(time.Duration(i%4) * 300 * time.Microsecond); cancel() }()
		release(t, h)
		wg.Wait()
		cancel()
	}
	if check.overlaps != 0 || check.badToken != 0 || check.grants < 60 {
		t.Errorf("grants %d, overlaps %d, non-increasing tokens %d", check.grants, check.overlaps, check.badToken)
	}
}

// Issue 10: ZooKeeper work per handoff does not grow with the queue. N
// foreground waiters of one engine on one object drain through local
// handoffs: each waiter, woken by its predecessor's release, proves from the
// shared listing and its own engine's deletions that it is first and takes
// privateLock without listing the N children again.
//
// What is counted is the engine's listings (getChildren requests) during the
// drain, not the packets the server received: those include the keepers'
// syncs, which are sent per interval and so grow per handoff on a slow
// machine (issue 24: 2.78 packets per handoff beside other test packages,
// 2.02-2.08 alone). The packets are logged, for the record only.
func TestLocalHandoffDoesNotListPerHandoff(t *testing.T) {
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{})
	root := testRoot(t, z)
	e := newEngine(t, z.Servers(), root)
	conn := rawConn(t, z.Servers())
	mntr := func(key string) int64 {
		m, err := z.Mntr(1)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(m[key], 10, 64)
		return n
	}
	for _, n := range []int{50, 300} {
		obj := fmt.Sprintf("LH-%d", n)
		h := acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
		var check overlapChecker
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				check.enter(g.Token())
				check.leave()
				release(t, g)
			}()
		}
		waitFor(t, 60*time.Second, "all queued", func() bool { return len(children(t, conn, root, obj)) == n+2 })
		// Every waiter has listed and set its watch (one per waiter: on its
		// predecessor, or on privateLock for the first) — counted, not slept.
		// (One session: the first waiter's watch on privateLock is the
		// holder's own, so n watches in all.)
		waitFor(t, 60*time.Second, "every waiter watching", func() bool { return mntr("zk_watch_count") >= int64(n) })
		lists, pkts, start := e.Listings(), mntr("zk_packets_received"), time.Now()
		release(t, h)
		wg.Wait()
		listed := e.Listings() - lists
		t.Logf("%d waiters: %d listings in the drain; for the record %.2f packets per handoff, %.0f handoffs/s",
			n, listed, float64(mntr("zk_packets_received")-pkts)/float64(n), float64(n)/time.Since(start).Seconds())
		if check.overlaps != 0 || check.badToken != 0 {
			t.Errorf("overlaps %d, non-increasing tokens %d", check.overlaps, check.badToken)
		}
		// A listing per handoff would be n; the shortcut needs none. A few
		// are allowed for a wake-up that races a listing in flight.
		if listed > int64(n)/10 {
			t.Errorf("%d waiters: %d listings during the drain: a listing per handoff", n, listed)
		}
	}
}
