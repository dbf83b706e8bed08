package lock_test

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
)

// Review of 440e718 (the plugin audit leaves the children of live requests
// unread). A recorded name stands for a node only as long as the object
// node it was created under: child names repeat when the object node is
// renewed (deleted and created again: an operator's deleteall, a reaped
// container, the engine's own renewal near the sequence limit). A request
// that stays live across a renewal (it queues again in the new object node
// and is granted there) keeps its old name recorded; an orphan of the
// session that later gets that same name in the new object node must still
// be deleted by the audit, as it was before the commit.
func TestReviewAuditOrphanAtRenewedName(t *testing.T) {
	root := testRoot(t, zkServer)
	obs := &orphanObserver{}
	const period = 200 * time.Millisecond
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.AuditInterval = period; o.Observer = obs })
	conn := rawConn(t, zkServer.Servers())
	obj := fmt.Sprintf("RN-%d", time.Now().UnixNano()) // a container of an earlier run may linger
	objPath := root + "/" + obj

	// A holder outside any engine (a raw client: no release of its own
	// after the object node is gone): its child and privateLock.
	if _, err := lock.PlantOrphan(context.Background(), e, "RN-root", true); err != nil { // creates the root
		t.Fatal(err)
	}
	acl := zk.WorldACL(zk.PermAll)
	if _, err := conn.CreateContainer(objPath, nil, zk.FlagContainer, acl); err != nil {
		t.Fatal(err)
	}
	hn, err := conn.Create(objPath+"/A-", nil, zk.FlagEphemeralSequential, acl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Create(objPath+"/privateLock", nil, zk.FlagEphemeral, acl); err != nil {
		t.Fatal(err)
	}
	res := make(chan *lock.Grant, 1)
	go func() {
		g, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		res <- g
	}()
	waitFor(t, 10*time.Second, "the waiter queued", func() bool { return len(children(t, conn, root, obj)) == 3 })
	kids := children(t, conn, root, obj)
	old := ""
	for _, k := range kids {
		if k != path.Base(hn) && k != "privateLock" {
			old = k
		}
	}
	// An operator deletes the object with everything under it (deleteall).
	ops := []any{}
	for _, k := range kids {
		ops = append(ops, &zk.DeleteRequest{Path: objPath + "/" + k, Version: -1})
	}
	ops = append(ops, &zk.DeleteRequest{Path: objPath, Version: -1})
	if _, err := conn.Multi(ops...); err != nil {
		t.Fatalf("deleteall: %v", err)
	}
	// The waiter queues again in the new object node and is granted there.
	g := <-res
	if g == nil {
		t.FailNow()
	}
	defer release(t, g)

	// A node of the session that nothing owns, created in the new object
	// node, gets the waiter's old name (as a bug would leave it).
	planted, err := lock.PlantOrphan(context.Background(), e, obj, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the waiter's first child %s, its grant's %s, the orphan %s", old, g.Node(), planted)
	if planted != old {
		t.Fatalf("the orphan is %s, not the waiter's old name %s: the test did not exercise a repeated name", planted, old)
	}
	// Both orphans deleted (RN-root's may come after the planted one's on a
	// loaded machine), and nothing else.
	waitFor(t, 50*period, "the audit to delete the orphan while the grant is held", func() bool {
		return slices.Contains(obs.list(), obj+"/"+planted) && len(obs.list()) >= 2
	})
	if got := obs.list(); len(got) != 2 {
		t.Errorf("the audit deleted %v, want only the orphan planted in RN-root and %s/%s", got, obj, planted)
	}
	if g.State() != lock.Held {
		t.Errorf("the grant is %v", g.State())
	}
}

// idleNames waits until the session records no name, no live id: the
// records of the plugin audit do not outlive the requests.
func idleNames(t *testing.T, e *lock.Engine) {
	t.Helper()
	waitFor(t, 10*time.Second, "no recorded names, no live ids", func() bool {
		n, b, l := lock.ReviewAuditNames(e)
		return n == 0 && b == 0 && l == 0
	})
}

// A child left behind by a request that ended (its delete lost) is deleted
// by the audit although its name was recorded; while its request id is
// live again (AcquireOptions.RequestID reused by a later acquire, here a
// grant held on another object) it is left, and deleted once that grant
// ends, as before the commit (the id in its data decides).
func TestReviewAuditLeftBehind(t *testing.T) {
	root := testRoot(t, zkServer)
	obs := &orphanObserver{}
	const period = 100 * time.Millisecond
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.AuditInterval = period; o.Observer = obs })
	conn := rawConn(t, zkServer.Servers())
	ctx := context.Background()

	// Live, then ended: deleted.
	n1, end1, err := lock.ReviewAuditLeftBehind(ctx, e, "LB1", "rev-x")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * period)
	if d := obs.list(); len(d) != 0 || !slices.Contains(children(t, conn, root, "LB1"), n1) {
		t.Fatalf("the audit deleted %v while the request was live", d)
	}
	end1()
	waitFor(t, 20*period, "the left-behind child deleted", func() bool { return slices.Contains(obs.list(), "LB1/"+n1) })

	// Left behind while a later acquire reuses the id: left until it ends.
	n2, end2, err := lock.ReviewAuditLeftBehind(ctx, e, "LB2", "rev-y")
	if err != nil {
		t.Fatal(err)
	}
	g := acquire(t, e, "LB3", lock.Foreground, lock.AcquireOptions{RequestID: "rev-y"})
	end2()
	time.Sleep(4 * period)
	if slices.Contains(obs.list(), "LB2/"+n2) || !slices.Contains(children(t, conn, root, "LB2"), n2) {
		t.Fatalf("the audit deleted %s while its request id was live again", n2)
	}
	release(t, g)
	waitFor(t, 20*period, "the left-behind child deleted once its id ended", func() bool { return slices.Contains(obs.list(), "LB2/"+n2) })
	if d := obs.list(); len(d) != 2 {
		t.Errorf("the audit deleted %v, want the two left-behind children", d)
	}
	idleNames(t, e)
}

// fastObserver counts fast-path hits and the audit's deletions.
type fastObserver struct {
	orphanObserver
	hits atomic.Int64
}

func (o *fastObserver) FastPath(hit bool) {
	if hit {
		o.hits.Add(1)
	}
}

// The fast path's one-multi grant (a prediction hit) records no name: its
// child is audited as before (read, and left while the grant is held),
// while an orphan planted beside it is deleted.
func TestReviewAuditFastPathGrant(t *testing.T) {
	root := testRoot(t, zkServer)
	obs := &fastObserver{}
	const period = 100 * time.Millisecond
	// A persistent object node: an empty container is reaped within the test
	// server's 100 ms, and a loaded machine then lost the prediction
	// (ObjectNode does not change the fast path or the audit).
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) {
		o.AuditInterval, o.Observer, o.ObjectNode = period, obs, lock.Persistent
	})
	conn := rawConn(t, zkServer.Servers())
	t.Cleanup(func() { _ = conn.Delete(root+"/FP", -1) })
	release(t, acquire(t, e, "FP", lock.Foreground, lock.AcquireOptions{}))
	idleNames(t, e)
	g := acquire(t, e, "FP", lock.Foreground, lock.AcquireOptions{})
	defer release(t, g)
	if obs.hits.Load() != 1 {
		t.Fatalf("fast-path hits %d, want 1 (the second acquire's prediction)", obs.hits.Load())
	}
	if n, _, _ := lock.ReviewAuditNames(e); n != 0 {
		t.Errorf("the fast path's grant recorded %d names, want 0", n)
	}
	planted, err := lock.PlantOrphan(context.Background(), e, "FP", true)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*period, "the orphan beside the grant deleted", func() bool { return slices.Contains(obs.list(), "FP/"+planted) })
	time.Sleep(3 * period)
	if d := obs.list(); len(d) != 1 {
		t.Errorf("the audit deleted %v, want only FP/%s", d, planted)
	}
	if got := children(t, conn, root, "FP"); !equalSet(got, []string{g.Node(), "privateLock"}) || g.State() != lock.Held {
		t.Errorf("children %v, grant %v; want the grant's child and privateLock, held", got, g.State())
	}
}

// Memory and concurrency: acquires, cancelled waits, refused tries, fast
// and slow grants and reused request ids on 8 objects, on two engines,
// while one engine audits every millisecond. Nothing here is an orphan
// (any deletion is a bug, as is an overlap), and once idle the session
// records no name and no live id.
func TestReviewAuditChurn(t *testing.T) {
	root := testRoot(t, zkServer)
	obs := &orphanObserver{}
	e1 := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.AuditInterval = time.Millisecond; o.Observer = obs })
	e2 := newEngine(t, zkServer.Servers(), root, noAudit)
	const objs = 8
	checks := make([]overlapChecker, objs)
	var maxNames atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		e := e1
		if i >= 6 {
			e = e2
		}
		wg.Go(func() {
			for c := range 30 {
				obj := (i + c) % objs
				o := lock.AcquireOptions{Wait: time.Minute}
				ctx, cancel := context.WithCancel(context.Background())
				switch c % 5 {
				case 1:
					o.TryOnce = true
				case 2:
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(1+c%7)*time.Millisecond)
				case 3:
					o.RequestID = fmt.Sprintf("reuse-%d", i%2) // repeats, also concurrently
				}
				g, err := e.Acquire(ctx, fmt.Sprintf("CH-%d", obj), lock.Type(c%2), o)
				cancel()
				if n, _, _ := lock.ReviewAuditNames(e1); int64(n) > maxNames.Load() {
					maxNames.Store(int64(n))
				}
				if err != nil {
					var ile *lock.InstanceLockError
					if !errors.As(err, &ile) {
						t.Errorf("acquire: %v", err)
					}
					continue
				}
				checks[obj].enter(g.Token())
				time.Sleep(time.Duration(c%3) * time.Millisecond)
				checks[obj].leave()
				if err := g.Release(context.Background()); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	for i := range checks {
		if c := &checks[i]; c.overlaps != 0 || c.badToken != 0 {
			t.Errorf("object %d: overlaps %d, non-increasing tokens %d", i, c.overlaps, c.badToken)
		}
	}
	if d := obs.list(); len(d) != 0 {
		t.Errorf("the audit deleted %v", d)
	}
	t.Logf("at most %d names recorded at once", maxNames.Load())
	if maxNames.Load() == 0 {
		t.Errorf("no name was ever recorded: the test did not exercise the records")
	}
	idleNames(t, e1)
}

// The native protocol records no names (its children's names carry their
// request ids): waiters, cancelled waits and grants with audits running
// leave nothing recorded and nothing deleted.
func TestReviewAuditNativeUnaffected(t *testing.T) {
	root := testRoot(t, zkServer)
	obs := &orphanObserver{}
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) {
		o.Protocol = lock.Native
		o.AuditInterval = 5 * time.Millisecond
		o.Observer = obs
	})
	h := acquire(t, e, "NA", lock.Foreground, lock.AcquireOptions{})
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if i%2 == 1 {
				ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
			}
			defer cancel()
			g, err := e.Acquire(ctx, "NA", lock.Type(i%2), lock.AcquireOptions{Wait: time.Minute, RequestID: "nat"})
			if err == nil {
				release(t, g)
			}
		})
	}
	waitFor(t, 10*time.Second, "waiters", func() bool { return e.Health().Waiting >= 3 })
	time.Sleep(400 * time.Millisecond)
	if n, b, _ := lock.ReviewAuditNames(e); n != 0 || b != 0 {
		t.Errorf("native requests recorded %d names (%d ids)", n, b)
	}
	release(t, h)
	wg.Wait()
	if d := obs.list(); len(d) != 0 {
		t.Errorf("the audit deleted %v", d)
	}
	idleNames(t, e)
}

// The same through the engine's own renewal near the sequence limit: a
// request whose child landed past the refusal point deletes it and waits
// for the object node to be renewed (drainWait), then queues and is
// granted in the new one. Its first child's name must not keep an orphan
// of the session that gets that name in the new object node.
func TestReviewAuditOrphanAtDrainedName(t *testing.T) {
	defer lock.SetSeqLimits(6, 12)()
	root := testRoot(t, zkServer)
	obs := &orphanObserver{}
	const period = 200 * time.Millisecond
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.AuditInterval = period; o.Observer = obs })
	other := newEngine(t, zkServer.Servers(), root, noAudit)
	conn := rawConn(t, zkServer.Servers())
	const obj = "DR"
	objPath := root + "/" + obj

	h := acquire(t, other, obj, lock.Foreground, lock.AcquireOptions{})
	seq := func(p string) int {
		n, err := strconv.Atoi(p[len(p)-10:])
		if err != nil {
			t.Fatalf("sequence of %s: %v", p, err)
		}
		return n
	}
	last := 0
	for range 12 { // past the refusal point
		n, err := conn.Create(objPath+"/B-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		if err != nil {
			t.Fatal(err)
		}
		last = seq(n)
		if err := conn.Delete(n, -1); err != nil {
			t.Fatal(err)
		}
	}
	want := last + 1
	old := fmt.Sprintf("A-%010d", want) // the name the waiter's create gets
	_, st, err := conn.Exists(objPath)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan *lock.Grant, 1)
	go func() {
		g, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		res <- g
	}()
	waitFor(t, 10*time.Second, "the waiter's create past the refusal point", func() bool {
		_, st2, err := conn.Exists(objPath)
		return err == nil && st2.Cversion >= st.Cversion+2 // its child created and deleted
	})
	release(t, h)
	g := <-res
	if g == nil {
		t.FailNow()
	}
	defer release(t, g)
	// Raw nodes move the new object node's counter to just before the old name.
	var pads []string
	defer func() {
		for _, p := range pads {
			_ = conn.Delete(p, -1)
		}
	}()
	for len(pads) == 0 || seq(pads[len(pads)-1]) < want-1 {
		p, err := conn.Create(objPath+"/B-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		if err != nil {
			t.Fatal(err)
		}
		pads = append(pads, p)
	}
	planted, err := lock.PlantOrphan(context.Background(), e, obj, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the waiter's first child %s, its grant's %s, the orphan %s", old, g.Node(), planted)
	if planted != old {
		t.Fatalf("the orphan is %s, not the waiter's first name %s: the test did not exercise a repeated name", planted, old)
	}
	waitFor(t, 20*period, "the audit to delete the orphan while the grant is held", func() bool {
		return slices.Contains(obs.list(), obj+"/"+planted)
	})
}

// Outside the audit (found while writing the renewed-name test): a holder
// whose object node was deleted under it (an operator's deleteall) and
// renewed by another engine's acquire releases with a multi guarded by the
// object node's data version and its child's name, both of which repeat in
// the renewed object node: the release deletes the new holder's
// privateLock and child. Skipped: not fixed here (grant.go's release).
func TestReviewAuditReleaseAfterRenewal(t *testing.T) {
	t.Skip("finding outside the audit, left to the lead: a release after a renewal deletes the new grant's nodes")
	root := testRoot(t, zkServer)
	old := newEngine(t, zkServer.Servers(), root, noAudit, func(o *lock.Options) { o.HolderWatchDelay = time.Minute })
	e := newEngine(t, zkServer.Servers(), root, noAudit)
	conn := rawConn(t, zkServer.Servers())
	obj := fmt.Sprintf("RR-%d", time.Now().UnixNano())
	objPath := root + "/" + obj
	h := acquire(t, old, obj, lock.Foreground, lock.AcquireOptions{})
	ops := []any{}
	for _, k := range children(t, conn, root, obj) {
		ops = append(ops, &zk.DeleteRequest{Path: objPath + "/" + k, Version: -1})
	}
	if _, err := conn.Multi(append(ops, &zk.DeleteRequest{Path: objPath, Version: -1})...); err != nil {
		t.Fatalf("deleteall: %v", err)
	}
	g := acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
	t.Logf("old holder's child %s, new holder's %s", h.Node(), g.Node())
	err := h.Release(context.Background())
	t.Logf("the old holder's release: %v", err)
	if got := children(t, conn, root, obj); !equalSet(got, []string{g.Node(), "privateLock"}) {
		t.Errorf("after the old holder's release the children are %v, want the new holder's %s and privateLock", got, g.Node())
	}
	if o, err := newEngine(t, zkServer.Servers(), root, noAudit).Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{TryOnce: true}); err == nil {
		t.Errorf("a third engine was granted %s while the new holder's grant is %v", obj, g.State())
		_ = o.Release(context.Background())
	}
	_ = g.Release(context.Background())
}
