package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
)

// TestAcquireAll: a set's lease lists every object with its own token
// (Object/Token the first's); a second set overlapping it is not granted
// while it is held; a revocation of one object is the loss of the lease
// (Lost fires, Err wraps ErrLockLost); a set is not re-entrant.
func TestAcquireAll(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	l, err := c.AcquireAll(ctx, []string{"set-b", "set-a"}, client.WithInfo("set"))
	if err != nil {
		t.Fatal(err)
	}
	objs := l.Objects()
	if len(objs) != 2 || objs[0].Object != "set-a" || objs[1].Object != "set-b" || l.Object() != "set-a" || l.Token() != objs[0].Token ||
		objs[0].Token == objs[1].Token || l.Permit() != -1 {
		t.Fatalf("set lease: objects %+v, object %q token %d permit %d", objs, l.Object(), l.Token(), l.Permit())
	}
	var ile *client.InstanceLockError
	if _, err := c.AcquireAll(ctx, []string{"set-b", "set-c"}, client.WithWait(0)); !errors.As(err, &ile) {
		t.Errorf("an overlapping set while held: %v, want *InstanceLockError", err)
	}
	if _, err := c.AcquireAll(ctx, []string{"set-x"}, client.WithReentry(l.ID())); !isField(err, "lease_id") {
		t.Errorf("a set with WithReentry: %v, want a 400 naming lease_id", err)
	}
	if _, err := c.Revoke(ctx, "set-b", "test", objs[1].Token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(20 * time.Second):
		t.Fatal("Lost did not fire after one object of the set was revoked")
	}
	if err := l.Err(); !errors.Is(err, client.ErrLockLost) {
		t.Errorf("Err = %v, want ErrLockLost", err)
	}
}

// TestAcquirePermit: a semaphore of one permit is held once; a second
// request is not granted while it is held; Semaphore shows the holder;
// after the release the permit is free again.
func TestAcquirePermit(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	l, err := c.AcquirePermit(ctx, "sem-1", 1, client.WithInfo("first"))
	if err != nil {
		t.Fatal(err)
	}
	if l.Semaphore() != "sem-1" || l.Permit() != 0 || l.Token() <= 0 || l.Objects() != nil {
		t.Fatalf("permit lease: semaphore %q permit %d token %d objects %v", l.Semaphore(), l.Permit(), l.Token(), l.Objects())
	}
	var ile *client.InstanceLockError
	if _, err := c.AcquirePermit(ctx, "sem-1", 1, client.WithWait(0)); !errors.As(err, &ile) {
		t.Errorf("a second permit of 1: %v, want *InstanceLockError", err)
	}
	st, err := c.Semaphore(ctx, "sem-1")
	if err != nil || len(st.Holders) != 1 || st.Holders[0].Permit != 0 || st.Holders[0].Holder.Token != l.Token() || st.Holders[0].Holder.Info != "first" {
		t.Fatalf("Semaphore = %+v, %v", st, err)
	}
	if _, err := c.AcquirePermit(ctx, "sem-1", 0); !isField(err, "permits") {
		t.Errorf("permits 0: %v, want a 400 naming permits", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := c.AcquirePermit(ctx, "sem-1", 1, client.WithWait(0))
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func isField(err error, field string) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status == 400 && ae.Field == field
}
