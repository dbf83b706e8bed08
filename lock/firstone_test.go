package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
)

// A first touch is one multi that creates the object node, its sentinel
// and our child, and names us. If the object node is made between our
// read (no node) and that multi, the multi creates nothing and the
// request takes the usual way: another engine's first touch that won the
// race holds the lock, and we wait for it; a plugin's object node (no
// sentinel) gets one and is taken; a plugin holder there fails the
// acquire with ErrForeignNode. The hook makes them at the last moment.
func TestNativeFirstTouchRaced(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, native, noAudit)
	e2 := newEngine(t, zkServer.Servers(), root, native, noAudit)
	other := rawConn(t, zkServer.Servers())
	acl := zk.WorldACL(zk.PermAll)
	ctx := context.Background()
	release(t, acquire(t, e, "warm", lock.Foreground, lock.AcquireOptions{})) // the root exists
	release(t, acquire(t, e2, "warm", lock.Foreground, lock.AcquireOptions{}))

	for _, c := range []string{"engine", "plugin-object", "plugin-holder"} {
		t.Run(c, func(t *testing.T) {
			// new under -count=N too
			obj := fmt.Sprint("first-raced-", c, "-", time.Now().UnixNano())
			// not a sync.Once: e2's own acquire runs the hook again, inside it
			var fired atomic.Bool
			// e2's grant, made in the hook (on e's acquiring goroutine)
			heldBy := make(chan *lock.Grant, 1)
			undo := lock.SetFastMultiHook(func(objPath string) {
				if !strings.HasSuffix(objPath, "/"+obj) {
					return
				}
				if fired.Swap(true) {
					return
				}
				switch c {
				case "engine": // e2's own first touch wins (its hook call finds fired set: skipped)
					g, err := e2.Acquire(ctx, obj, lock.Foreground, lock.AcquireOptions{Wait: 5 * time.Second})
					if err != nil {
						t.Error(err)
					}
					heldBy <- g
				case "plugin-object", "plugin-holder":
					if _, err := other.Create(objPath, nil, 0, acl); err != nil {
						t.Error(err)
					}
					if c == "plugin-holder" {
						if _, err := other.Create(objPath+"/A-", nil, zk.FlagEphemeralSequential, acl); err != nil {
							t.Error(err)
						}
					}
				}
			})
			defer undo()
			type result struct {
				g   *lock.Grant
				err error
			}
			done := make(chan result, 1)
			go func() {
				g, err := e.Acquire(ctx, obj, lock.Foreground, lock.AcquireOptions{Wait: 5 * time.Second})
				done <- result{g, err}
			}()
			switch c {
			case "engine":
				select {
				case r := <-done:
					t.Fatalf("granted while another engine holds the object: %v", r.err) // (not r.g: printing a live grant races with its engine)
				case <-time.After(500 * time.Millisecond):
				}
				held := <-heldBy
				if held == nil {
					t.Fatal("the other engine's first touch was not granted")
				}
				tok := held.Token()
				release(t, held)
				r := <-done
				if r.err != nil {
					t.Fatal(r.err)
				}
				if r.g.Token() <= tok {
					t.Errorf("token %d after the other holder's %d", r.g.Token(), tok)
				}
				release(t, r.g)
			case "plugin-object":
				r := <-done
				if r.err != nil {
					t.Fatal(r.err)
				}
				release(t, r.g)
				if ok, _, err := other.Exists(objPath(root, obj) + "/privateLock/native"); err != nil || !ok {
					t.Errorf("no sentinel made under the plugin's object node: %v, %v", ok, err)
				}
			case "plugin-holder":
				r := <-done
				if !errors.Is(r.err, lock.ErrForeignNode) {
					t.Fatalf("beside a plugin holder: granted %v, %v; want ErrForeignNode", r.g != nil, r.err)
				}
			}
			if !fired.Load() {
				t.Fatal("the hook did not run: no first-touch multi was sent")
			}
			kids, _, err := other.Children(objPath(root, obj))
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range kids {
				if strings.Contains(k, "_x_") {
					t.Errorf("a native child left behind: %s (children %v)", k, kids)
				}
			}
		})
	}
}

func objPath(root, obj string) string { return root + "/" + obj }

// Objects taken by turns on two engines (W3's common case, there on
// eight sidecars): an engine's prediction, from its own last release, is
// stale whenever the other engine used the object since, and a stale one
// is a refused write (then a read and the write). After a few stale ones
// the engine reads first on every object, not once per object: the read
// still tells whether a prediction would have held (its version), and the
// engine predicts again once they hold (an object it alone uses, W1).
func TestNativePredictionsStaleReadFirst(t *testing.T) {
	root := testRoot(t, zkServer)
	_, eA, eB, obs := predictors(t, root)
	const objects = 40
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	obj := func(i int) string { return fmt.Sprintf("turns-%s-%d", run, i) }
	for i := range objects { // A, then B, on every object: A's predictions are all stale now
		release(t, acquire(t, eA, obj(i), lock.Foreground, lock.AcquireOptions{}))
		release(t, acquire(t, eB, obj(i), lock.Foreground, lock.AcquireOptions{}))
	}
	h0, m0 := obs.hits.Load(), obs.misses.Load()
	var chk overlapChecker
	for i := range objects {
		g := acquire(t, eA, obj(i), lock.Foreground, lock.AcquireOptions{})
		chk.enter(g.Token())
		chk.leave()
		release(t, g)
	}
	if refused := obs.misses.Load() - m0; refused > 6 {
		t.Errorf("%d of %d stale predictions sent as refused writes; want the engine to read first after a few", refused, objects)
	}
	// one object A alone uses: its predictions hold again, and after a few
	// reads showing so they are used without one
	h1, r1 := obs.hits.Load(), eA.PreReads()
	for range 12 {
		release(t, acquire(t, eA, obj(0), lock.Foreground, lock.AcquireOptions{}))
	}
	hits, reads := obs.hits.Load()-h1, eA.PreReads()-r1
	if hits != 12 || reads > 6 {
		t.Errorf("12 acquires of an object A alone uses: %d on the prediction, %d read first; want 12, and at most 6 reads", hits, reads)
	}
	t.Logf("stale round: %d refused; alone: %d on the prediction, %d read first (before: %d hits)", obs.misses.Load()-m0, hits, reads, h0)
}
