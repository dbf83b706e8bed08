package lock_test

import (
	"context"
	"slices"
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
	other := newEngine(t, zkServer.Servers(), root, noAudit)
	conn := rawConn(t, zkServer.Servers())
	const obj = "RN"
	objPath := root + "/" + obj

	h := acquire(t, other, obj, lock.Foreground, lock.AcquireOptions{})
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
		if k != h.Node() && k != "privateLock" {
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
	_ = h.Release(context.Background()) // lost with the object node

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
	waitFor(t, 20*period, "the audit to delete the orphan while the grant is held", func() bool {
		return slices.Contains(obs.list(), obj+"/"+planted)
	})
	if got := obs.list(); len(got) != 1 {
		t.Errorf("the audit deleted %v, want only %s/%s", got, obj, planted)
	}
	if g.State() != lock.Held {
		t.Errorf("the grant is %v", g.State())
	}
}
