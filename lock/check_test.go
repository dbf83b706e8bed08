package lock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/testenv"
)

// TestCheck: Engine.Check through a second engine (another session) says
// current only for the holder's token, stale for the one before and after,
// free once released, and stale for the old token as soon as the next
// grant's Acquire has returned; a privateLock Baton did not create is
// checked by its creation zxid too; a bad object name is ErrInvalidObject.
func TestCheck(t *testing.T) {
	root := testRoot(t, zkServer)
	a := newEngine(t, zkServer.Servers(), root)
	b := newEngine(t, zkServer.Servers(), root)
	ctx := context.Background()
	const obj = "check/1"
	check := func(e *lock.Engine, tok int64) (bool, int64) {
		t.Helper()
		cur, holder, err := e.Check(ctx, obj, tok)
		if err != nil {
			t.Fatalf("Check(%d): %v", tok, err)
		}
		return cur, holder
	}
	if cur, h := check(b, 1); cur || h != 0 {
		t.Fatalf("free object: current %v holder %d", cur, h)
	}
	g := acquire(t, a, obj, lock.Foreground, lock.AcquireOptions{})
	for _, c := range []struct {
		tok  int64
		want bool
	}{{g.Token(), true}, {g.Token() - 1, false}, {g.Token() + 1, false}, {0, false}, {-g.Token(), false}} {
		if cur, h := check(b, c.tok); cur != c.want || h != g.Token() {
			t.Errorf("Check(%d) with holder %d: current %v holder %d, want %v", c.tok, g.Token(), cur, h, c.want)
		}
	}
	old := g
	for i := range 10 {
		release(t, old)
		next := acquire(t, []*lock.Engine{b, a}[i%2], obj, lock.Foreground, lock.AcquireOptions{})
		for _, e := range []*lock.Engine{a, b} {
			if cur, h := check(e, old.Token()); cur || h != next.Token() {
				t.Fatalf("round %d: old token %d right after the new grant %d: current %v holder %d", i, old.Token(), next.Token(), cur, h)
			}
		}
		old = next
	}
	release(t, old)

	// A privateLock of someone else's (the plugin's): its czxid is its token.
	conn := rawConn(t, zkServer.Servers())
	name, _ := lock.EscapeObject("check/foreign")
	if _, err := conn.Create(root+"/"+name, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	if _, err := conn.Create(root+"/"+name+"/privateLock", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	_, st, err := conn.Exists(root + "/" + name + "/privateLock")
	if err != nil {
		t.Fatal(err)
	}
	if cur, h, err := b.Check(ctx, "check/foreign", st.Czxid); err != nil || !cur || h != st.Czxid {
		t.Errorf("foreign privateLock czxid %d: current %v holder %d err %v", st.Czxid, cur, h, err)
	}
	if err := conn.Delete(root+"/"+name+"/privateLock", -1); err != nil {
		t.Fatal(err)
	}
	if cur, h, err := b.Check(ctx, "check/foreign", st.Czxid); err != nil || cur || h != 0 {
		t.Errorf("deleted foreign privateLock: current %v holder %d err %v", cur, h, err)
	}

	if _, _, err := b.Check(ctx, "", 1); !errors.Is(err, lock.ErrInvalidObject) {
		t.Errorf("Check of an empty name: %v, want ErrInvalidObject", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := b.Check(cctx, obj, 1); !errors.Is(err, context.Canceled) && !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Check with a cancelled context: %v", err)
	}
}

// TestCheckLaggingFollower: an engine connected to a follower cut off from
// its peers (which still answers reads, for syncLimit x tickTime, from the
// state it had at the cut) never answers current for a token made stale by
// a grant the ensemble committed after the cut: Check's sync goes through
// the leader, so it answers after catching up or not at all (an error).
// A read through that follower without a sync does see the stale
// privateLock: shown in the test, so the fault is real.
func TestCheckLaggingFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("ensemble")
	}
	t.Parallel()
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{Nodes: 3, ExtraConfig: []string{"syncLimit=20"}})
	leader, err := z.Leader()
	if err != nil {
		t.Fatal(err)
	}
	follower := leader%3 + 1
	root := testRoot(t, z)
	a := newEngine(t, []string{z.Addr(leader)}, root)
	b := newEngine(t, []string{z.Addr(follower)}, root)
	stale := rawConn(t, []string{z.Addr(follower)})
	const obj = "lag/1"
	name, _ := lock.EscapeObject(obj)
	pl := root + "/" + name + "/privateLock"
	ctx := context.Background()

	g1 := acquire(t, a, obj, lock.Foreground, lock.AcquireOptions{})
	if cur, _, err := b.Check(ctx, obj, g1.Token()); err != nil || !cur {
		t.Fatalf("before the cut: Check through the follower = %v, %v; want current", cur, err)
	}
	cut := newIptablesCut(t)
	q, el := z.PeerPorts(follower)
	fPort, _ := strconv.Atoi(z.Addr(follower)[strings.LastIndex(z.Addr(follower), ":")+1:])
	links := peerPorts(t, z.PID(follower), fPort)
	if len(links) == 0 {
		t.Fatal("found no peer links of the follower")
	}
	for _, p := range append([]int{q, el}, links...) {
		cut.dropPort(p)
	}
	release(t, g1)
	g2 := acquire(t, a, obj, lock.Foreground, lock.AcquireOptions{})
	defer release(t, g2)

	// The follower lags: a plain read through it still shows g1.
	if ok, st, err := stale.Exists(pl); err != nil || !ok || st.Czxid != g1.Token() {
		t.Fatalf("read through the cut follower without a sync: exists %v, czxid %v, err %v; want g1's %d (the follower does not lag: the test shows nothing)", ok, st, err, g1.Token())
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cur, holder, err := b.Check(cctx, obj, g1.Token())
	if cur {
		t.Fatalf("Check of g1's token %d through the lagging follower after g2 (%d) was granted: current (holder %d)", g1.Token(), g2.Token(), holder)
	}
	t.Logf("Check through the lagging follower: current %v holder %d err %v", cur, holder, err)
}
