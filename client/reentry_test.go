package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
)

// TestLockReenters: Lock inside Lock's fn on the same object re-enters
// (the context carries the lease) instead of waiting on itself until 423:
// same lease, same token, 2 holds; the inner release keeps the lock, the
// outer frees it. Another object inside is an ordinary acquire.
func TestLockReenters(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	err := c.Lock(ctx, "re", func(ctx context.Context) error {
		outer := client.LeaseFrom(ctx)
		return c.Lock(ctx, "re", func(ctx context.Context) error {
			inner := client.LeaseFrom(ctx)
			if inner.ID() != outer.ID() || inner.Token() != outer.Token() || inner.Holds() != 2 {
				t.Errorf("inner lease %s token %d holds %d, want %s token %d holds 2",
					inner.ID(), inner.Token(), inner.Holds(), outer.ID(), outer.Token())
			}
			st, err := c.Inspect(ctx, "re")
			if err != nil || st.Holder == nil || st.Holder.Holds != 2 {
				t.Errorf("inspect inside: %+v %v", st, err)
			}
			return nil
		}, client.WithWait(0))
	}, client.WithWait(time.Second))
	if err != nil {
		t.Fatalf("nested Lock = %v", err)
	}
	if st, err := c.Inspect(ctx, "re"); err != nil || st.Holder != nil {
		t.Errorf("after both: %+v %v", st, err)
	}
}

// TestReentryHolds: Acquire with WithReentry; releases count down; a third
// release is ErrNoNode; a lease id of another object is a 400 on lease_id.
func TestReentryHolds(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	l1, err := c.Acquire(ctx, "holds")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.Acquire(ctx, "holds", client.WithReentry(l1.ID()))
	if err != nil {
		t.Fatal(err)
	}
	if l2.ID() != l1.ID() || l2.Token() != l1.Token() || l2.Holds() != 2 {
		t.Fatalf("re-entry: %s %d holds %d", l2.ID(), l2.Token(), l2.Holds())
	}
	other, err := c.Acquire(ctx, "holds-other")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(ctx, "holds-other", client.WithReentry(l1.ID()))
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Kind != api.BadRequest || !strings.Contains(err.Error(), "lease_id") {
		t.Errorf("re-entry on another object = %v, want a 400 naming lease_id", err)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Inspect(ctx, "holds"); st == nil || st.Holder == nil {
		t.Fatalf("freed after one of two releases: %+v", st)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Inspect(ctx, "holds"); st == nil || st.Holder != nil {
		t.Fatalf("still held after two releases: %+v", st)
	}
	if err := l1.Release(ctx); !errors.Is(err, client.ErrNoNode) {
		t.Errorf("third release = %v, want ErrNoNode", err)
	}
}

// TestRevokeTellsHolder: Client.Revoke of a lease this client holds: Lost
// fires at once with reason "revoked: …"; Lock's fn sees its ctx cancelled.
func TestRevokeTellsHolder(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	var told time.Duration
	err := c.Lock(ctx, "revoke-me", func(ctx context.Context) error {
		t0 := time.Now()
		v, err := c.Revoke(context.Background(), "revoke-me", "test", 0)
		// Local may be false: the holder's sidecar can see the revocation
		// through its watch and end the lease before the request handler
		// does (it happened at a load of 25; issue 24).
		if err != nil || v.Token != client.LeaseFrom(ctx).Token() {
			t.Errorf("Revoke = %+v, %v", v, err)
		}
		<-ctx.Done()
		told = time.Since(t0)
		return context.Cause(ctx)
	}, client.WithLease(time.Minute))
	t.Logf("fn's context cancelled %v after Revoke was called", told.Round(time.Millisecond))
	var ae *client.APIError
	if !errors.Is(err, client.ErrLockLost) || !errors.As(err, &ae) || ae.Reason != "revoked: test" {
		t.Errorf("Lock = %v, want ErrLockLost, reason revoked: test", err)
	}
	if _, err := c.Revoke(ctx, "never-held", "", 0); !errors.Is(err, client.ErrNoNode) {
		t.Errorf("Revoke of a free object = %v, want ErrNoNode", err)
	}
}

// TestLockPreempted: a preemptible Lock's fn sees its context cancelled
// (cause ErrPreempted) when a foreground WithPreempt request arrives; it
// returns, Lock releases, and the requester is granted.
func TestLockPreempted(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	in := make(chan struct{})
	done := make(chan error, 1)
	var told time.Time
	go func() {
		done <- c.Lock(ctx, "preempt-me", func(ctx context.Context) error {
			close(in)
			<-ctx.Done()
			told = time.Now()
			return context.Cause(ctx)
		}, client.WithPreemptible(3*time.Second), client.WithType(client.Background))
	}()
	<-in
	time.Sleep(100 * time.Millisecond) // past the holder watch's arming delay
	t0 := time.Now()
	l, err := c.Acquire(ctx, "preempt-me", client.WithPreempt(0, false), client.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("preempting acquire: %v", err)
	}
	granted := time.Now()
	defer l.Release(ctx)
	err = <-done
	t.Logf("holder's fn cancelled %v after the preempting acquire; granted %v after", told.Sub(t0).Round(time.Millisecond), granted.Sub(t0).Round(time.Millisecond))
	if !errors.Is(err, client.ErrPreempted) {
		t.Errorf("Lock = %v, want ErrPreempted", err)
	}
}
