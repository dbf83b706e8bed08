package sidecar_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/sidecar"
)

// TestDeliveryReentryEndsLostAfterTold: an op delivery's grant made
// re-enterable (HoldDelivery, what the dispatcher calls) is re-entered by
// the app through the API: 200, holds 2, a valid_until in the future. The
// delivery then ends (cancelled by a preemption's cleanup, a revocation,
// the app timeout — or the app answered first) and the dispatcher does what
// worker.go does: done, then g.Release. The lock must not be free for
// another sidecar before the valid_until told to the re-entered holder, and
// that holder must be told "lost" (410), not "released" (404: baton lock
// would then keep CMD running).
func TestDeliveryReentryEndsLostAfterTold(t *testing.T) {
	root := testRoot(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	ctx := context.Background()
	g, err := a.srv.Engine().Acquire(ctx, "dl", lock.Background, lock.AcquireOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	id, done := a.srv.HoldDelivery(g)
	re := a.acquire("dl", `{"lease_id":"`+id+`"}`)
	if re.Holds != 2 {
		t.Fatalf("re-entry holds %d, want 2", re.Holds)
	}
	told := re.ValidUntil.Time
	t.Logf("re-entered: holds %d, told valid for %d ms", re.Holds, re.ValidForMS)
	// The delivery ends: worker.go's order.
	done("")
	_ = g.Release(ctx)
	st, body := b.call("POST", "/v1/locks/dl/acquire", `{"wait_ms":0}`)
	now := time.Now()
	if st == 200 {
		if now.Before(told) {
			t.Errorf("sc-b granted %v BEFORE the valid_until told to the re-entered holder (holds was 2)", told.Sub(now).Round(time.Millisecond))
		}
		b.release(decodeLease(t, body).LeaseID)
	}
	gst, gb := a.call("GET", "/v1/leases/"+id, "")
	t.Logf("re-entered holder now sees: %d %s", gst, gb)
	if gst != 410 {
		t.Errorf("re-entered holder told %d (want 410 LockLost before the lock is freed)", gst)
	}
}

// TestReentryRacingLastRelease: a DELETE of the last hold racing an
// acquire that re-enters the lease. A re-entry answered 200 with holds 2
// and a valid_until must keep the lock (the release then counts one hold
// down), never see it freed under it.
func TestReentryRacingLastRelease(t *testing.T) {
	root := testRoot(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	for i := 0; i < 300; i++ {
		l := a.acquire("rr", `{"lease_ms":60000}`)
		var wg sync.WaitGroup
		var rst int
		var rbody []byte
		wg.Add(2)
		go func() { defer wg.Done(); a.call("DELETE", "/v1/leases/"+l.LeaseID, "") }()
		go func() {
			defer wg.Done()
			rst, rbody = a.call("POST", "/v1/locks/rr/acquire", `{"lease_id":"`+l.LeaseID+`"}`)
		}()
		wg.Wait()
		if rst != 200 {
			continue // the release won cleanly: 410/400 for the re-entry
		}
		re := decodeLease(t, rbody)
		if re.State != api.StateHeld || re.Holds != 2 {
			a.call("DELETE", "/v1/leases/"+l.LeaseID, "") // the hold left, if any
			continue
		}
		// The re-entry was told: held, holds 2, valid_until. Is it still held?
		st, _ := b.call("POST", "/v1/locks/rr/acquire", `{"wait_ms":0}`)
		if st == 200 {
			now := time.Now()
			t.Fatalf("iteration %d: re-entry answered 200 holds 2 valid for %d ms, yet sc-b was granted %v before that valid_until",
				i, re.ValidForMS, re.ValidUntil.Sub(now).Round(time.Millisecond))
		}
		a.release(l.LeaseID) // the re-entered hold
	}
}

// slowLost is a log handler that takes 500 ms for the "lease lost" line
// (a slow log sink: a pipe that is read late).
type slowLost struct{ slog.Handler }

func (h slowLost) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "lease lost" && os.Getenv("BATON_TEST_NOSLEEP") == "" {
		time.Sleep(500 * time.Millisecond)
	}
	return h.Handler.Handle(ctx, r)
}
func (h slowLost) Enabled(context.Context, slog.Level) bool { return true }
func (h slowLost) WithAttrs(as []slog.Attr) slog.Handler    { return slowLost{h.Handler.WithAttrs(as)} }
func (h slowLost) WithGroup(n string) slog.Handler          { return slowLost{h.Handler.WithGroup(n)} }

// TestRevokeDuringDrainWaitsTold: a revocation during a drain ends the
// last lease, which wakes the drain. The drain must still wait for the
// valid_until told to the revoked holder before it closes the engine (whose
// session's end frees the lock): the lease is recorded as revoked in the
// same step that ends it, however slow the log line between them is.
func TestRevokeDuringDrainWaitsTold(t *testing.T) {
	root := testRoot(t)
	cfgA := testConfig(t, root, "sc-a")
	cfgA.ZKSessionTimeout = 8 * time.Second
	a := start(t, cfgA, func(o *sidecar.Options) { o.Logger = slog.New(slowLost{slog.DiscardHandler}) })
	b := start(t, testConfig(t, root, "sc-b"))
	l := a.acquire("dr", `{"lease_ms":60000}`)
	a.mustCall(202, "POST", "/v1/drain", "")
	r := decodeLease(t, a.mustCall(200, "POST", "/v1/leases/"+l.LeaseID+"/renew", ""))
	told := r.ValidUntil.Time
	t.Logf("draining, renewed: state %s, valid for %d ms", r.State, r.ValidForMS)
	go a.call("POST", "/v1/locks/dr/revoke", `{"reason":"drain test"}`)
	lb := b.acquire("dr", `{"wait_ms":20000}`)
	granted := time.Now()
	t.Logf("sc-b granted %v relative to the told valid_until", granted.Sub(told).Round(time.Millisecond))
	if granted.Before(told) {
		t.Errorf("sc-b granted %v BEFORE the valid_until told to the revoked holder", told.Sub(granted).Round(time.Millisecond))
	}
	b.release(lb.LeaseID)
}

// TestReentryBetweenReleaseSteps: the interleaving of
// TestReentryRacingLastRelease made deterministic: the DELETE's
// releaseHold sees holds == 1 and drops l.mu; a re-entry then gets 200,
// holds 2 and a valid_until; the rest of the DELETE must then count one
// hold down instead of freeing the lock.
func TestReentryBetweenReleaseSteps(t *testing.T) {
	root := testRoot(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	l := a.acquire("rs", `{"lease_ms":60000}`)
	rest := sidecar.SplitRelease(a.srv, l.LeaseID)
	re := a.acquire("rs", `{"lease_id":"`+l.LeaseID+`"}`)
	t.Logf("re-entry: state %s holds %d valid for %d ms", re.State, re.Holds, re.ValidForMS)
	rest()
	st, body := b.call("POST", "/v1/locks/rs/acquire", `{"wait_ms":0}`)
	if st == 200 && time.Now().Before(re.ValidUntil.Time) {
		t.Errorf("sc-b granted %v before the valid_until told to the re-entered hold (holds 2)", time.Until(re.ValidUntil.Time).Round(time.Millisecond))
		b.release(decodeLease(t, body).LeaseID)
	}
	gst, gb := a.call("GET", "/v1/leases/"+l.LeaseID, "")
	t.Logf("re-entered holder then sees %d %s", gst, gb)
	if gst != 200 {
		t.Errorf("the re-entered hold (told valid for %d ms) answers %d, want 200 with one hold left", re.ValidForMS, gst)
	} else {
		a.release(l.LeaseID)
	}
}

// TestBoundOwnerExitKeepsReenteredHold: process P (curl) acquires
// with "bind":"process" and stays alive (a second request waits); another
// process (this test) re-enters the lease: 200, holds 2, a valid_until.
// P exits: the lease ends (lost), but the lock must not be freed before the
// valid_until told to the live re-entered hold.
func TestBoundOwnerExitKeepsReenteredHold(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed")
	}
	root := testRoot(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	blocker := a.acquire("blk", `{"lease_ms":60000}`)
	cmd := exec.Command(curl, "-sS", "--unix-socket", a.cfg.SocketPath,
		"-d", `{"lease_ms":60000,"bind":"process"}`, "http://sidecar/v1/locks/po/acquire",
		"--next", "--unix-socket", a.cfg.SocketPath, "-d", `{"wait_ms":1500}`, "http://sidecar/v1/locks/blk/acquire")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var l api.Lease
	if err := json.NewDecoder(out).Decode(&l); err != nil {
		t.Fatal(err)
	}
	re := a.acquire("po", `{"lease_id":"`+l.LeaseID+`"}`)
	t.Logf("re-entered from pid %d: holds %d, valid for %d ms", os.Getpid(), re.Holds, re.ValidForMS)
	_, _ = io.Copy(io.Discard, out)
	_ = cmd.Wait()
	lb := b.acquire("po", `{"wait_ms":5000}`)
	if now := time.Now(); now.Before(re.ValidUntil.Time) {
		t.Errorf("sc-b granted %v before the valid_until told to the live re-entered hold", re.ValidUntil.Sub(now).Round(time.Millisecond))
	}
	b.release(lb.LeaseID)
	a.release(blocker.LeaseID)
}
