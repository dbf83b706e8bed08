package lock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
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
