package lock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
)

// A native fast acquire that read the object free grants from its multi's
// answer when that answer counts two children (the sentinel and ours):
// no listing. Anything that came in between must still be seen: a
// waiter's child created between the read and our multi sorts ahead of
// ours, and we must not be granted past it; a plugin node must fail the
// acquire. The hook puts them there at the last moment, on another
// session (one made by hand, as another engine or the plugin would).
func TestNativeFastAloneSeesArrivals(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, native, func(o *lock.Options) { o.AuditInterval = -1 })
	other := rawConn(t, zkServer.Servers())
	acl := zk.WorldACL(zk.PermAll)
	ctx := context.Background()

	for _, c := range []struct{ name, child string }{
		{"waiter", "A_x_byhand_"}, // a foreground waiter of another engine, queued before us
		{"plugin", "A-"},          // the plugin's node
	} {
		t.Run(c.name, func(t *testing.T) {
			obj := "alone-" + c.name
			// a first touch and a turn of another engine: e's prediction
			// (from its own release) is refused by the other's version,
			// so e reads the object and sends the multi under test (the
			// hook runs before both multis; the child it made before the
			// refused one is still there for the second)
			release(t, acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{}))
			e2 := newEngine(t, zkServer.Servers(), root, native)
			release(t, acquire(t, e2, obj, lock.Foreground, lock.AcquireOptions{}))

			var once sync.Once
			var made string
			undo := lock.SetFastMultiHook(func(objPath string) {
				if !strings.HasSuffix(objPath, "/"+obj) {
					return
				}
				once.Do(func() {
					p, err := other.Create(objPath+"/"+c.child, nil, zk.FlagEphemeralSequential, acl)
					if err != nil {
						t.Error(err)
					}
					made = p
				})
			})
			defer undo()
			g, err := e.Acquire(ctx, obj, lock.Foreground, lock.AcquireOptions{Wait: 1500 * time.Millisecond})
			undo()
			if made == "" {
				t.Fatal("the hook did not run: the acquire did not take the fast path after a read")
			}
			switch c.name {
			case "waiter":
				if err == nil {
					release(t, g)
					t.Fatalf("granted (token %d) past the waiter %s queued before us", g.Token(), made)
				}
				if _, ok := errors.AsType[*lock.InstanceLockError](err); !ok {
					t.Fatalf("acquire behind a waiter that never takes: %v; want a timeout", err)
				}
			case "plugin":
				if err == nil {
					release(t, g)
					t.Fatalf("granted (token %d) beside the plugin node %s", g.Token(), made)
				}
				if !errors.Is(err, lock.ErrForeignNode) || !strings.Contains(err.Error(), made[strings.LastIndexByte(made, '/')+1:]) {
					t.Fatalf("acquire beside a plugin node: %v; want ErrForeignNode naming it", err)
				}
			}
			// nothing of ours is left behind, and with the node gone the
			// object is free again
			kids, _, err := other.Children(root + "/" + obj)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range kids {
				if k != "privateLock" && root+"/"+obj+"/"+k != made {
					t.Errorf("child %s left after the refused acquire", k)
				}
			}
			if err := other.Delete(made, -1); err != nil {
				t.Fatal(err)
			}
			release(t, acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{}))
		})
	}
}
