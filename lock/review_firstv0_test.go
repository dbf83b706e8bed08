package lock_test

// Independent review of 6bd422b: a native first touch (the object node
// missing, made by this request's ensureNativeFrom) sends its one-write
// grant without reading the node it made: the write is guarded by data
// version 0, and the multi's answer is taken as "known" (czxid -1) on
// whichever incarnation it landed. The hooks below act just before that
// multi (lock.SetFastMultiHook through faHook, or a stepDialer gate), on
// other sessions, and the tests check who holds, never timings.

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
)

var fv0ACL = zk.WorldACL(zk.PermAll)

// fv0Holder writes data naming req as the only holder (shared or not),
// guarded by version.
func fv0Holder(t *testing.T, conn *zk.Conn, objPath, req string, shared bool, version int32) {
	t.Helper()
	b := fmt.Appendf(nil, `{"native":1,"h":[{"r":%q,"s":%v}]}`, req, shared)
	if _, err := conn.Set(objPath, b, version); err != nil {
		t.Errorf("set %s at version %d: %v", objPath, version, err)
	}
}

// A holder of another participant joins between our object node's
// creation and our first write: its child (background, so that ours,
// foreground, sorts ahead of it) and its name in the data (the node's
// first write: version 0 → 1). Our write, guarded by version 0, must be
// refused: exclusive, we queue behind the holder (an unguarded write would
// erase its name, and our child sorting first would pass for "nobody
// ahead"); shared beside a shared holder, we are granted and the data
// names both.
func TestReviewFirstV0HolderJoinsBeforeWrite(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprint("shared=", shared), func(t *testing.T) {
			root := testRoot(t, zkServer)
			conn := rawConn(t, zkServer.Servers())
			hconn := rawConn(t, zkServer.Servers())
			eA := newEngine(t, zkServer.Servers(), root, native, noAudit, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
			// a first touch in two writes (the node, then the grant guarded by version 0): the path under review, which a one-multi first touch falls back to
			lock.SplitFirstTouch(eA)
			release(t, acquire(t, eA, "warm", lock.Foreground, lock.AcquireOptions{}))
			obj := fmt.Sprint("hj-", time.Now().UnixNano()) // new under -count=N too
			objPath := root + "/" + obj
			m := map[bool]string{false: "x", true: "s"}[shared]
			var hnode string
			hooked := make(chan struct{})
			ran, undo := faHook(t, obj, func(objPath string) {
				defer close(hooked)
				if _, st, err := conn.Get(objPath); err != nil || st.Version != 0 {
					t.Errorf("setup: the object node before our write: %v, %v (want version 0: this is the first touch)", st, err)
				}
				p, err := hconn.Create(objPath+"/B_"+m+"_rawH_", nil, zk.FlagEphemeralSequential, fv0ACL)
				if err != nil {
					t.Error(err)
					return
				}
				hnode = p
				fv0Holder(t, conn, objPath, "rawH", shared, 0)
			})
			ch := grantAsync(context.Background(), eA, obj, lock.Foreground, lock.AcquireOptions{Shared: shared, Wait: 30 * time.Second, RequestID: "rqA"})
			waitClosed(t, hooked, "the hook")
			if shared {
				r := <-ch
				undo()
				if !ran() {
					t.Fatal("the hook did not run: not the first touch's one-write grant")
				}
				if r.err != nil {
					t.Fatal(r.err)
				}
				if !namesIn(t, conn, objPath, "rawH") || !namesIn(t, conn, objPath, "rqA") {
					t.Errorf("the data after the shared grant does not name both shared holders")
				}
				release(t, r.g)
				if !namesIn(t, conn, objPath, "rawH") {
					t.Errorf("our release dropped the other shared holder")
				}
				if err := hconn.Delete(hnode, -1); err != nil {
					t.Fatal(err)
				}
				return
			}
			r, granted := queuedOrGranted(t, conn, ch, objPath, "rqA")
			undo()
			if !ran() {
				t.Fatal("the hook did not run: not the first touch's one-write grant")
			}
			if granted {
				if r.err == nil {
					release(t, r.g)
				}
				t.Fatalf("granted (%v) while rawH holds (named in the data, its child %s live)", r.err, path.Base(hnode))
			}
			if !namesIn(t, conn, objPath, "rawH") {
				t.Errorf("the holder's name was erased from the data while it holds")
			}
			_, hst, err := conn.Get(objPath)
			if err != nil {
				t.Fatal(err)
			}
			if err := hconn.Delete(hnode, -1); err != nil { // the holder leaves (its child gone: it holds nothing)
				t.Fatal(err)
			}
			r = <-ch
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.g.Token() <= hst.Mzxid {
				t.Errorf("token %d not after the holder's write %d", r.g.Token(), hst.Mzxid)
			}
			release(t, r.g)
		})
	}
}

// An operator deletes the object node just made (deleteall) and makes it
// again before our first write, as the brief's cases: free data at version
// 0 (a grant in the one write on the new incarnation, and the prediction
// it leaves is that incarnation's: the next acquire is a hit); free data
// written once (version 1: refused, then queued and granted); no sentinel
// (the multi's check refuses; the sentinel is made again); a plugin holder
// (ephemeral privateLock: ErrForeignNode, never granted); a plugin waiter
// beside a native sentinel (ErrForeignNode); a native foreground waiter
// (queued behind it). Whatever the case, the plugin is kept out after.
func TestReviewFirstV0RecreatedBeforeWrite(t *testing.T) {
	free := []byte(`{"native":1}`)
	native3 := func(conn *zk.Conn, objPath string, data []byte) error {
		_, err := conn.Multi(
			&zk.CreateRequest{Path: objPath, Data: data, Acl: fv0ACL},
			&zk.CreateRequest{Path: objPath + "/privateLock", Data: data, Acl: fv0ACL},
			&zk.CreateRequest{Path: objPath + "/privateLock/native", Acl: fv0ACL},
		)
		return err
	}
	cases := []struct {
		name string
		// make recreates the node (after the deleteall) on conn, with
		// ephemeral nodes on wconn; it returns a node that must be gone
		// before we are granted ("" if none)
		make    func(t *testing.T, conn, wconn *zk.Conn, objPath string) string
		oneShot bool // granted in the one write (token = our child's czxid)
		foreign bool // ErrForeignNode expected
		renew   bool // the hook deletes and recreates (false: it does nothing)
	}{
		{"none", func(*testing.T, *zk.Conn, *zk.Conn, string) string { return "" }, true, false, false},
		{"free-v0", func(t *testing.T, conn, _ *zk.Conn, p string) string {
			if err := native3(conn, p, free); err != nil {
				t.Error(err)
			}
			return ""
		}, true, false, true},
		{"free-v1", func(t *testing.T, conn, _ *zk.Conn, p string) string {
			if err := native3(conn, p, free); err != nil {
				t.Error(err)
			}
			if _, err := conn.Set(p, free, 0); err != nil {
				t.Error(err)
			}
			return ""
		}, false, false, true},
		{"empty-v0-no-sentinel", func(t *testing.T, conn, _ *zk.Conn, p string) string {
			if _, err := conn.Create(p, nil, 0, fv0ACL); err != nil {
				t.Error(err)
			}
			return ""
		}, false, false, true},
		{"plugin-holder", func(t *testing.T, conn, wconn *zk.Conn, p string) string {
			if _, err := conn.Create(p, nil, 0, fv0ACL); err != nil {
				t.Error(err)
			}
			if _, err := wconn.Create(p+"/privateLock", nil, zk.FlagEphemeral, fv0ACL); err != nil {
				t.Error(err)
			}
			return ""
		}, false, true, true},
		{"plugin-waiter-v0", func(t *testing.T, conn, wconn *zk.Conn, p string) string {
			if err := native3(conn, p, free); err != nil {
				t.Error(err)
			}
			if _, err := wconn.Create(p+"/A-", nil, zk.FlagEphemeralSequential, fv0ACL); err != nil {
				t.Error(err)
			}
			return ""
		}, false, true, true},
		{"native-waiter-v0", func(t *testing.T, conn, wconn *zk.Conn, p string) string {
			if err := native3(conn, p, free); err != nil {
				t.Error(err)
			}
			w, err := wconn.Create(p+"/A_x_byhand_", nil, zk.FlagEphemeralSequential, fv0ACL)
			if err != nil {
				t.Error(err)
			}
			return w
		}, false, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := testRoot(t, zkServer)
			conn := rawConn(t, zkServer.Servers())
			wconn := rawConn(t, zkServer.Servers())
			obs := &countObserver{}
			eA := newEngine(t, zkServer.Servers(), root, native, noAudit, func(o *lock.Options) { o.Observer = obs; o.HolderWatchDelay = time.Minute })
			// a first touch in two writes (the node, then the grant guarded by version 0): the path under review, which a one-multi first touch falls back to
			lock.SplitFirstTouch(eA)
			release(t, acquire(t, eA, "warm", lock.Foreground, lock.AcquireOptions{}))
			obj := fmt.Sprint("rc-", time.Now().UnixNano()) // new under -count=N too
			objPath := root + "/" + obj
			var blocker string
			var czxid1 int64
			hooked := make(chan struct{})
			ran, undo := faHook(t, obj, func(objPath string) {
				defer close(hooked)
				_, st, err := conn.Get(objPath)
				if err != nil || st.Version != 0 {
					t.Errorf("setup: the object node before our write: %v, %v (want version 0: the first touch)", st, err)
					return
				}
				czxid1 = st.Czxid
				if !c.renew {
					return
				}
				if err := faDeleteAll(conn, objPath); err != nil {
					t.Error(err)
					return
				}
				blocker = c.make(t, conn, wconn, objPath)
			})
			ch := grantAsync(context.Background(), eA, obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, RequestID: "rqA"})
			waitClosed(t, hooked, "the hook")
			var r asyncResult
			if blocker != "" || c.foreign {
				select {
				case r = <-ch:
				case <-time.After(500 * time.Millisecond): // a wrong grant shows here; not a condition of the pass
				}
			}
			if c.foreign {
				if r.g == nil && r.err == nil {
					r = <-ch
				}
				undo()
				if !ran() {
					t.Fatal("the hook did not run")
				}
				if r.err == nil {
					release(t, r.g)
					t.Fatalf("granted (token %d) beside a plugin participant", r.g.Token())
				}
				if !errors.Is(r.err, lock.ErrForeignNode) {
					t.Errorf("error %v, want ErrForeignNode", r.err)
				}
				for _, k := range faKids(t, conn, objPath) {
					if strings.Contains(k, "rqA") {
						t.Errorf("left its child %s", k)
					}
				}
				return
			}
			if blocker != "" {
				if r.g != nil || r.err != nil {
					if r.err == nil {
						release(t, r.g)
					}
					t.Fatalf("granted (%v) ahead of the waiter %s first in line on the new node", r.err, path.Base(blocker))
				}
				if _, granted := queuedOrGranted(t, conn, ch, objPath, "rqA"); granted {
					t.Fatalf("granted ahead of the waiter %s first in line on the new node", path.Base(blocker))
				}
				if err := wconn.Delete(blocker, -1); err != nil {
					t.Fatal(err)
				}
			}
			r = <-ch
			undo()
			if !ran() {
				t.Fatal("the hook did not run")
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			_, st, err := conn.Get(objPath)
			if err != nil {
				t.Fatal(err)
			}
			if (st.Czxid != czxid1) != c.renew {
				t.Fatalf("setup: the object node renewed: %v, want %v", st.Czxid != czxid1, c.renew)
			}
			one := childCzxid(t, conn, objPath, r.g.Node()) == r.g.Token()
			if one != c.oneShot {
				t.Errorf("granted in the one write: %v, want %v", one, c.oneShot)
			}
			if ok, _, err := conn.Exists(objPath + "/privateLock/native"); err != nil || !ok {
				t.Errorf("granted without the sentinel's mark in place (%v)", err)
			}
			release(t, r.g)
			// the prediction the release left belongs to the new node: the
			// next acquire (this engine alone) is a hit, in its one write
			h0 := obs.hits.Load()
			g := acquire(t, eA, obj, lock.Foreground, lock.AcquireOptions{})
			if c.oneShot && obs.hits.Load() != h0+1 {
				t.Errorf("the acquire after a first touch granted on the renewed node: %d predicted hits, want 1", obs.hits.Load()-h0)
			}
			pluginKeptOut(t, objPath) // its nodes move the sequence: after the hit
			release(t, g)
			if k := faKids(t, conn, objPath); len(k) != 0 {
				t.Errorf("left %v", k)
			}
		})
	}
}

// The first touch's one-write grant is applied and its answer lost (the
// connection cut just after it is sent): the request gives back what
// landed once reconnected, queues and is granted; another engine's
// request with a lock-delay meanwhile is granted without one (nobody
// vanished), never beside it; tokens increase, nothing is left.
func TestReviewFirstV0CutInFlight(t *testing.T) {
	root := testRoot(t, zkServer)
	conn := rawConn(t, zkServer.Servers())
	gate := &stepDialer{}
	eA := newEngine(t, zkServer.Servers(), root, native, noAudit, func(o *lock.Options) { o.Dialer = gate.dial })
	eC := newEngine(t, zkServer.Servers(), root, native, noAudit)
	// a first touch in two writes (the node, then the grant guarded by version 0): the path under review, which a one-multi first touch falls back to
	lock.SplitFirstTouch(eA)
	release(t, acquire(t, eA, "warm", lock.Foreground, lock.AcquireOptions{}))
	obj := fmt.Sprint("ci-", time.Now().UnixNano()) // new under -count=N too
	objPath := root + "/" + obj
	cut := gate.once(isGrantMulti(objPath), func() bool { return true })
	bg := context.Background()
	ach := grantAsync(bg, eA, obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, RequestID: "rqA"})
	waitClosed(t, cut, "the cut of the first touch's one-write grant")
	cch := grantAsync(bg, eC, obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second, LockDelay: time.Minute})
	takeBothNoDelay(t, &overlapChecker{}, eC, ach, cch)
	if k := faKids(t, conn, objPath); len(k) != 0 {
		t.Errorf("left %v", k)
	}
}

// A first touch that asks for a lock-delay (exclusive foreground, shared
// background) never sends the one-write grant guarded by version 0: it
// queues, and its view reads the data.
func TestReviewFirstV0NotForLockDelay(t *testing.T) {
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, native, noAudit)
	release(t, acquire(t, e, "warm", lock.Foreground, lock.AcquireOptions{}))
	var n atomic.Int64
	pre := fmt.Sprint("ld", time.Now().UnixNano()) // new under -count=N too
	undo := lock.SetFastMultiHook(func(objPath string) {
		if strings.Contains(objPath, "/"+pre) {
			n.Add(1)
		}
	})
	t.Cleanup(undo)
	for i := range 3 {
		release(t, acquire(t, e, fmt.Sprint(pre, "x", i), lock.Foreground, lock.AcquireOptions{LockDelay: time.Second}))
		release(t, acquire(t, e, fmt.Sprint(pre, "s", i), lock.Background, lock.AcquireOptions{Shared: true, LockDelay: time.Second}))
	}
	if n.Load() != 0 {
		t.Errorf("%d fast multis for first touches with a lock-delay, want 0", n.Load())
	}
}
