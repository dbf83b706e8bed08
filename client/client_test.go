package client_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/testenv"
)

func TestAcquireRelease(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "a/b", client.WithInfo("job 1"), client.WithType(client.Background))
	if err != nil {
		t.Fatal(err)
	}
	if l.Object() != "a/b" || l.Token() <= 0 || l.ID() == "" || l.Type() != "background" || !strings.HasPrefix(l.Node(), "B-") {
		t.Errorf("lease: object %q token %d id %q type %s node %s", l.Object(), l.Token(), l.ID(), l.Type(), l.Node())
	}
	if v := l.ValidFor(); v <= 0 || v > sessionTimeout {
		t.Errorf("ValidFor = %v, want within the %v session timeout", v, sessionTimeout)
	}
	st, err := c.Inspect(ctx, "a/b")
	if err != nil || st.Holder == nil || st.Holder.Token != l.Token() || st.Holder.Info != "job 1" {
		t.Fatalf("Inspect = %+v, %v", st, err)
	}
	ls, err := c.List(ctx, client.ListOptions{Prefix: "a/"})
	if err != nil || len(ls.Locks) != 1 || ls.Locks[0].Object != "a/b" {
		t.Errorf("List = %+v, %v", ls, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, client.ErrNoNode) {
		t.Errorf("second Release = %v, want ErrNoNode", err)
	}
	select {
	case <-l.Lost():
		t.Errorf("Lost fired after a release")
	default:
	}
	if l.ValidFor() != 0 || l.Err() != nil {
		t.Errorf("after release: ValidFor %v Err %v", l.ValidFor(), l.Err())
	}
}

// TestReleaseNoWait: the answer-first release ends the lease (a second
// release is ErrNoNode, renewals stop, Lost does not fire), and the next
// acquire of the object through the same sidecar is granted after it with
// a greater token.
func TestReleaseNoWait(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "nowait")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseNoWait(ctx); err != nil {
		t.Fatal(err)
	}
	if l.State() != api.StateReleased || l.ValidFor() != 0 || l.Err() != nil {
		t.Errorf("after ReleaseNoWait: state %s, ValidFor %v, Err %v", l.State(), l.ValidFor(), l.Err())
	}
	if err := l.Release(ctx); !errors.Is(err, client.ErrNoNode) {
		t.Errorf("Release after ReleaseNoWait = %v, want ErrNoNode", err)
	}
	next, err := c.Acquire(ctx, "nowait", client.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() <= l.Token() {
		t.Errorf("next grant's token %d, not above the released %d", next.Token(), l.Token())
	}
	select {
	case <-l.Lost():
		t.Errorf("Lost fired after ReleaseNoWait")
	default:
	}
}

func TestInstanceLockError(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "ile", client.WithInfo("holder"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	for _, wait := range []time.Duration{0, 150 * time.Millisecond} {
		_, err = c.Acquire(ctx, "ile", client.WithWait(wait))
		var ile *client.InstanceLockError
		if !errors.As(err, &ile) {
			t.Fatalf("WithWait(%v): %v, want *InstanceLockError", wait, err)
		}
		if ile.Object != "ile" || ile.Type != "foreground" || ile.Position != 1 || ile.Waited < wait ||
			ile.Holder == nil || ile.Holder.Node != l.Node() || ile.Holder.Info != "holder" || ile.Holder.Sidecar != "sc-client" {
			t.Errorf("WithWait(%v): %+v (holder %+v)", wait, ile, ile.Holder)
		}
	}
}

// TestLongWaitKeepsValidity: a grant after a wait longer than the validity
// (the session timeout) is usable: its validity counts from the send
// time + waited_ms, never later than the sidecar's valid_until, and the
// lease is held (not reported lost) past another session timeout. On the
// old client (validity from the send time alone) ValidFor was 0 and the
// lease lost at once.
func TestLongWaitKeepsValidity(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	first, err := c.Acquire(ctx, "long-wait")
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		l    *client.Lease
		err  error
		sent time.Time
	}
	got := make(chan res, 1)
	sent := time.Now()
	go func() {
		l, err := c.Acquire(ctx, "long-wait", client.WithWait(3*sessionTimeout))
		got <- res{l, err, sent}
	}()
	time.Sleep(sessionTimeout + time.Second) // longer than the session timeout: longer than any validity
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("Acquire after a long wait: %v", r.err)
	}
	l := r.l
	v := l.Last()
	vf := l.ValidFor()
	t.Logf("granted after %v (waited_ms %d): valid_for_ms %d, ValidFor %v", time.Since(r.sent).Round(time.Millisecond), v.WaitedMS, v.ValidForMS, vf.Round(time.Millisecond))
	if v.WaitedMS < (sessionTimeout + 900*time.Millisecond).Milliseconds() {
		t.Fatalf("waited_ms = %d, want the %v wait", v.WaitedMS, sessionTimeout+time.Second)
	}
	if vf <= time.Second {
		t.Errorf("ValidFor right after the grant = %v, want most of valid_for_ms %d", vf, v.ValidForMS)
	}
	if local, told := l.ValidUntil().Round(0), v.ValidUntil.Add(time.Millisecond); local.After(told) {
		t.Errorf("client ValidUntil %v is later than the sidecar's valid_until %v", local, v.ValidUntil)
	}
	select {
	case <-l.Lost():
		t.Fatalf("lost while held: %v", l.Err())
	case <-time.After(sessionTimeout + time.Second): // past another session timeout
	}
	if st := l.State(); st != api.StateHeld || l.ValidFor() <= 0 {
		t.Errorf("after holding past a session timeout: state %s, ValidFor %v", st, l.ValidFor())
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release = %v", err)
	}
	if st := l.State(); st != api.StateReleased {
		t.Errorf("State after Release = %s", st)
	}
}

func TestAutoRenewKeepsShortLease(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "renew", client.WithLease(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	first := l.Last().LeaseExpiresAt
	timer := time.NewTimer(1500 * time.Millisecond) // five lease lengths
	select {
	case <-l.Lost():
		t.Fatalf("lost while renewing: %v", l.Err())
	case <-timer.C:
	}
	if l.ValidFor() <= 0 || !l.Last().LeaseExpiresAt.After(first.Add(time.Second)) {
		t.Errorf("ValidFor %v, lease_expires_at %v (first %v)", l.ValidFor(), l.Last().LeaseExpiresAt, first)
	}
	st, err := c.Inspect(ctx, "renew")
	if err != nil || st.Holder == nil || st.Holder.Token != l.Token() {
		t.Errorf("holder after 1.5 s = %+v, %v", st.Holder, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release = %v", err)
	}
}

func TestLostFiresOnLoss(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "lost", client.WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	deletePrivateLock(t, "lost")
	select {
	case <-l.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost did not fire")
	}
	t.Logf("Lost fired %v after the deletion", time.Since(t0).Round(time.Millisecond))
	var ae *client.APIError
	if err := l.Err(); !errors.Is(err, client.ErrLockLost) || !errors.As(err, &ae) || ae.Reason != api.ReasonLockDeleted {
		t.Errorf("Err = %v, want ErrLockLost with reason %q", err, api.ReasonLockDeleted)
	}
	if l.ValidFor() != 0 {
		t.Errorf("ValidFor after the loss = %v", l.ValidFor())
	}
	if err := l.Release(ctx); !errors.Is(err, client.ErrLockLost) {
		t.Errorf("Release after the loss = %v, want ErrLockLost", err)
	}
}

func TestRenewRefusedIsLost(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "expire", client.WithLease(100*time.Millisecond), client.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the sidecar to free the lock (another acquire gets it).
	l2, err := c.Acquire(ctx, "expire", client.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	err = l.Renew(ctx)
	var ae *client.APIError
	if !errors.Is(err, client.ErrLockLost) || !errors.As(err, &ae) || ae.Reason != api.ReasonLeaseExpired || ae.Status != 410 {
		t.Errorf("Renew of an expired lease = %v", err)
	}
	select {
	case <-l.Lost():
	default:
		t.Errorf("Lost not closed after a refused renewal")
	}
}

func TestLockRunsAndReleases(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	boom := errors.New("boom")
	err := c.Lock(ctx, "run", func(ctx context.Context) error {
		st, err := c.Inspect(ctx, "run")
		if err != nil || st.Holder == nil {
			t.Errorf("inside fn: %+v, %v", st, err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("Lock = %v, want fn's error", err)
	}
	if st, err := c.Inspect(ctx, "run"); err != nil || st.Holder != nil {
		t.Errorf("after Lock: %+v, %v", st, err)
	}
}

func TestLockCancelsOnLoss(t *testing.T) {
	c := newClient(t)
	err := c.Lock(context.Background(), "cancel", func(ctx context.Context) error {
		deletePrivateLock(t, "cancel")
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), client.ErrLockLost) {
			t.Errorf("cause = %v, want ErrLockLost", context.Cause(ctx))
		}
		return ctx.Err()
	})
	if !errors.Is(err, client.ErrLockLost) || !errors.Is(err, context.Canceled) {
		t.Errorf("Lock = %v, want ErrLockLost joined with context.Canceled", err)
	}
}

func TestErrors(t *testing.T) {
	ctx := context.Background()
	gone := client.New("/nonexistent/baton.sock")
	defer gone.Close()
	if _, err := gone.Acquire(ctx, "x"); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("no sidecar: %v, want ErrUnavailable", err)
	}
	c := newClient(t)
	_, err := c.Acquire(ctx, "x", client.WithType("urgent"))
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Kind != api.BadRequest || ae.Field != "type" {
		t.Errorf("bad type: %v", err)
	}
	_, err = c.Acquire(ctx, "x", client.WithWait(time.Hour))
	if !errors.As(err, &ae) || ae.Field != "wait_ms" {
		t.Errorf("wait of an hour: %v", err)
	} else if ae.MinMS == nil || ae.MaxMS == nil || *ae.MinMS != 0 || *ae.MaxMS != api.MaxWaitMS {
		t.Errorf("wait of an hour: bounds %v to %v, want 0 to %d ms", ae.MinMS, ae.MaxMS, api.MaxWaitMS)
	}
	_, err = c.Submit(ctx, api.OpRequest{Object: "x"})
	if !errors.Is(err, client.ErrUnavailable) || !errors.As(err, &ae) || ae.Kind != api.OpsDisabled {
		t.Errorf("Submit with ops disabled: %v", err)
	}
	if _, err := c.Op(ctx, "x"); !errors.As(err, &ae) || ae.Kind != api.OpsDisabled {
		t.Errorf("Op with ops disabled: %v", err)
	}
	if _, err := c.Replay(ctx, "x"); !errors.As(err, &ae) || ae.Kind != api.OpsDisabled {
		t.Errorf("Replay with ops disabled: %v", err)
	}
	h, err := c.Health(ctx)
	if err != nil || !h.Ready || h.Sidecar != "sc-client" {
		t.Errorf("Health = %+v, %v", h, err)
	}
	var zero client.Client // zero value: the default socket
	defer zero.Close()
	if _, err := os.Stat(api.DefaultSocket); err == nil {
		return // a real sidecar may answer there
	}
	if err := zero.Ready(ctx); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("zero Client without a sidecar at %s: %v", api.DefaultSocket, err)
	}
}

// TestDrainSeenAtOnce: when the sidecar starts draining, the lease says so
// at once (State draining, Changed fires) with DrainUntil counted from a
// recent request — not from the send time of the long-poll that reported
// the change, which may be long before — and never past the sidecar's
// drain_ends_at. The holder that releases within the grace is never lost.
func TestDrainSeenAtOnce(t *testing.T) {
	srv, c, done := ownSidecar(t, "drain", 4*time.Second, 10*time.Second)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "drain-seen")
	if err != nil {
		t.Fatal(err)
	}
	// Drain right after a renewal: the next one is about half a validity away.
	first := l.Last().ValidUntil
	testenv.WaitFor(t, 10*time.Second, "a renewal", func() bool { return !l.Last().ValidUntil.Equal(first.Time) })
	changed := l.Changed()
	t0 := time.Now()
	d := srv.Drain()
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("Changed did not fire on the drain")
	}
	testenv.WaitFor(t, 5*time.Second, "DrainUntil", func() bool { return !l.DrainUntil().IsZero() })
	seen := time.Since(t0)
	du := l.DrainUntil()
	t.Logf("draining seen after %v; DrainUntil %v after the drain began (grace 10 s)", seen.Round(time.Millisecond), du.Sub(t0).Round(time.Millisecond))
	if st := l.State(); st != api.StateDraining {
		t.Errorf("State = %s, want draining", st)
	}
	// At once through the long-poll, not at the next renewal: 500 ms plus a
	// few round trips, so that a loaded machine does not fail it (issue 24).
	var rtt time.Duration
	for range 3 {
		t1 := time.Now()
		_ = c.Ready(ctx)
		rtt = max(rtt, time.Since(t1))
	}
	if bound := 500*time.Millisecond + 10*rtt; seen > bound {
		t.Errorf("draining with its end seen %v after the drain began, want at once (≤ %v)", seen, bound)
	}
	if du.Round(0).After(d.EndsAt.Add(time.Millisecond)) || du.Sub(t0) < 9*time.Second {
		t.Errorf("DrainUntil %v after the drain began (ends_at %v), want just under the 10 s grace", du.Sub(t0), d.EndsAt)
	}
	if vu := l.ValidUntil(); vu.After(du) {
		t.Errorf("ValidUntil %v past DrainUntil %v", vu, du)
	}
	if err := l.Release(ctx); err != nil || l.Err() != nil {
		t.Errorf("Release during the drain = %v, Err %v", err, l.Err())
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
		done <- nil
	case <-time.After(10 * time.Second):
		t.Errorf("the sidecar did not stop after its only holder released")
	}
}
