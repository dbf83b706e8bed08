package client_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/sidecar"
	"github.com/batonhq/baton/testenv"
)

// stallSidecar starts a sidecar of its own on a ZooKeeper of its own (so
// that freezing it stalls no other test), with a 10 s session, and returns
// the ZooKeeper and a client of the sidecar.
func stallSidecar(t *testing.T, name string) (*testenv.ZooKeeper, *client.Client) {
	t.Helper()
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{TickTime: 500 * time.Millisecond})
	cfg := props.Defaults()
	cfg.ZKServers, cfg.LockRoot, cfg.NodeID = z.Servers(), lockRoot+"-"+name, "sc-"+name
	cfg.SocketPath = filepath.Join(t.TempDir(), "s.sock")
	cfg.ZKSessionTimeout = 10 * time.Second
	srv, err := sidecar.New(cfg, sidecar.Options{Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sidecar Run: %v", err)
		}
	})
	c := client.New(cfg.SocketPath)
	t.Cleanup(func() { c.Close() })
	testenv.WaitFor(t, 30*time.Second, "sidecar ready", func() bool { return c.Ready(context.Background()) == nil })
	return z, c
}

// TestLockStopsAGraceBeforeValidityEnds: ZooKeeper frozen (SIGSTOP) under a
// Lock: the sidecar reports the lease suspect and stops extending its
// validity, and Lock cancels fn's context a grace before that validity
// ends — while the lock is still valid — with a cause that says so (not a
// loss). The old Lock cancelled fn only on a loss or a preemption: its fn
// ran on until the validity had ended (ValidFor 0, cause ErrLockLost).
func TestLockStopsAGraceBeforeValidityEnds(t *testing.T) {
	z, c := stallSidecar(t, "stall")
	const grace = time.Second
	resumed := true
	defer func() {
		if !resumed {
			_ = z.Resume(1)
		}
	}()
	type seen struct {
		left  time.Duration // validity left when fn's ctx was cancelled
		state string
		cause error
	}
	got := make(chan seen, 1)
	err := c.Lock(context.Background(), "stall-obj", func(ctx context.Context) error {
		l := client.LeaseFrom(ctx)
		if err := z.Pause(1); err != nil {
			t.Error(err)
			return err
		}
		resumed = false
		t.Logf("zookeeper frozen; validity left %v", l.ValidFor().Round(time.Millisecond))
		<-ctx.Done()
		var left time.Duration // 0 once lost (ValidUntil zero)
		if vu := l.ValidUntil(); !vu.IsZero() {
			left = time.Until(vu)
		}
		got <- seen{left: left, state: l.State(), cause: context.Cause(ctx)}
		if err := z.Resume(1); err != nil {
			t.Error(err)
		}
		resumed = true
		return ctx.Err()
	}, client.WithStopGrace(grace))
	s := <-got
	t.Logf("fn's ctx cancelled with %v of validity left (grace %v), state %s, cause: %v; Lock = %v",
		s.left.Round(time.Millisecond), grace, s.state, s.cause, err)
	if s.left <= 0 {
		t.Errorf("fn's ctx cancelled when the lock's validity had ended (%v left), want a grace (%v) before it", s.left, grace)
	}
	if s.state != api.StateSuspect {
		t.Errorf("lease state at the cancellation = %s, want %s", s.state, api.StateSuspect)
	}
	if !errors.Is(s.cause, client.ErrValidityEnding) || errors.Is(s.cause, client.ErrLockLost) {
		t.Errorf("cause = %v, want ErrValidityEnding (not a loss)", s.cause)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Lock = %v, want fn's context.Canceled", err)
	}
}

// TestLockStopsAGraceBeforeDrainEnds: the sidecar drains (shuts down) under
// a Lock: the lock stays valid until the end of its shutdown grace, and
// Lock cancels fn's context a grace before that end, while the lock is
// valid — not at the end, when the sidecar tells it lost. The old Lock
// cancelled fn only then (cause ErrLockLost, reason shutdown).
func TestLockStopsAGraceBeforeDrainEnds(t *testing.T) {
	srv, c, _ := ownSidecar(t, "drainstop", sessionTimeout, 6*time.Second)
	const grace = 2 * time.Second
	var left time.Duration
	var state string
	var cause error
	// A short lease: renewals every 200 ms, so the drain is seen at once
	// also without the long-poll.
	err := c.Lock(context.Background(), "drain-stop", func(ctx context.Context) error {
		l := client.LeaseFrom(ctx)
		srv.Drain()
		<-ctx.Done()
		if du := l.DrainUntil(); !du.IsZero() && l.Err() == nil {
			left = time.Until(du)
		}
		state, cause = l.State(), context.Cause(ctx)
		return ctx.Err()
	}, client.WithStopGrace(grace), client.WithLease(600*time.Millisecond))
	t.Logf("fn's ctx cancelled with %v left of the drain (grace %v), state %s, cause: %v; Lock = %v",
		left.Round(time.Millisecond), grace, state, cause, err)
	if left <= 0 || state != api.StateDraining {
		t.Errorf("fn's ctx cancelled with %v of the drain left, state %s; want a grace (%v) before its end, while draining", left, state, grace)
	}
	if !errors.Is(cause, client.ErrValidityEnding) || errors.Is(cause, client.ErrLockLost) {
		t.Errorf("cause = %v, want ErrValidityEnding (not a loss)", cause)
	}
	if !errors.Is(err, context.Canceled) || errors.Is(err, client.ErrLockLost) {
		t.Errorf("Lock = %v, want fn's context.Canceled and no loss", err)
	}
}

// TestLockNegativeStopGrace: a negative grace is refused before anything
// is acquired, naming the option.
func TestLockNegativeStopGrace(t *testing.T) {
	c := newClient(t)
	ran := false
	err := c.Lock(context.Background(), "neg-grace", func(context.Context) error { ran = true; return nil }, client.WithStopGrace(-time.Second))
	if err == nil || ran || !strings.Contains(err.Error(), "WithStopGrace") {
		t.Errorf("Lock with WithStopGrace(-1s) = %v (fn ran: %v), want an error naming WithStopGrace", err, ran)
	}
	if st, err := c.Inspect(context.Background(), "neg-grace"); err != nil || st.Holder != nil {
		t.Errorf("after the refusal: holder %+v, %v; want none", st, err)
	}
}
