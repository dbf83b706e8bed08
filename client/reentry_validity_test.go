package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
)

// TestReentryValidityNotInflated: a lease granted after a long wait
// (waited_ms ~2 s) is re-entered at once. The re-entry did not wait: its
// Lease must count its validity from the re-entry's send time, not that
// plus the original grant's wait (which would place it up to waited_ms past
// the valid_until the sidecar told).
func TestReentryValidityNotInflated(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	first, err := c.Acquire(ctx, "rv-infl")
	if err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(2 * time.Second); _ = first.Release(ctx) }()
	waited, err := c.Acquire(ctx, "rv-infl", client.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer waited.Release(ctx)
	t.Logf("granted after waited_ms=%d", waited.Last().WaitedMS)
	sent := time.Now()
	re, err := c.Acquire(ctx, "rv-infl", client.WithReentry(waited.ID()), client.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	defer re.Release(ctx)
	v := re.Last()
	told := sent.Add(time.Since(sent)).Add(time.Until(v.ValidUntil.Time)) // the sidecar's valid_until on our clock (wall)
	t.Logf("re-entry answer: waited_ms=%d valid_for_ms=%d; client ValidFor=%v", v.WaitedMS, v.ValidForMS, re.ValidFor().Round(time.Millisecond))
	if err := re.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	rv := re.Last()
	t.Logf("after a renewal: answer valid_for_ms=%d; client ValidFor=%v (Last() still the acquire's answer: waited_ms=%d valid_for_ms=%d)",
		rv.ValidForMS, re.ValidFor().Round(time.Millisecond), rv.WaitedMS, rv.ValidForMS)
	if excess := re.ValidUntil().Sub(sent.Add(time.Duration(v.ValidForMS)*time.Millisecond + time.Since(sent))); excess > 100*time.Millisecond {
		t.Errorf("re-entered lease counts itself valid %v past the sidecar's valid_until (%v): the original grant's waited_ms was added to the re-entry", excess.Round(time.Millisecond), told.Format(time.RFC3339Nano))
	}
}
