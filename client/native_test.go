package client_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/sidecar"
	"github.com/batonhq/baton/testenv"
)

// nativeSidecar starts a sidecar of the test's own with
// zookeeper.lock.protocol=native and returns a client of it.
func nativeSidecar(t testing.TB, name string) *client.Client {
	t.Helper()
	cfg := props.Defaults()
	cfg.ZKServers, cfg.LockRoot, cfg.NodeID = zkServers, lockRoot+"-native-"+name, "sc-"+name
	cfg.SocketPath = filepath.Join(t.TempDir(), "n.sock")
	cfg.ZKSessionTimeout = sessionTimeout
	cfg.LockProtocol, cfg.ObjectNode = "native", "persistent"
	cfg.ForegroundTimeout, cfg.BackgroundTimeout = 30*time.Second, 30*time.Second
	srv, err := sidecar.New(cfg, sidecar.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(context.Background()) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	c := newClientAt(t, cfg.SocketPath)
	testenv.WaitFor(t, 30*time.Second, "sidecar ready", func() bool { return c.Ready(context.Background()) == nil })
	return c
}

// TestShared (native protocol): two WithShared leases on one object are
// held together (the second tries once), each says its mode, Inspect shows
// both; an exclusive try-once is not granted beside them. Inside Lock's fn
// holding a shared lease, an Acquire of the same object re-enters only
// with WithShared: without it (exclusive) it is a 400 naming mode — no
// silent upgrade.
func TestShared(t *testing.T) {
	c := nativeSidecar(t, "shared")
	ctx := context.Background()
	r1, err := c.Acquire(ctx, "doc", client.WithShared())
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Release(ctx)
	err = c.Lock(ctx, "doc", func(ctx context.Context) error {
		st, err := c.Inspect(ctx, "doc")
		if err != nil || len(st.Holders) != 2 || st.Holders[0].Mode != api.ModeShared || st.Holders[1].Mode != api.ModeShared {
			t.Errorf("Inspect with two shared holders: %+v, %v", st, err)
		}
		if l := client.LeaseFrom(ctx); l == nil || l.Mode() != api.ModeShared {
			t.Errorf("Lock's lease: %v, want shared", l)
		}
		if _, err := c.Acquire(ctx, "doc", client.WithWait(0)); !isField(err, "mode") {
			t.Errorf("exclusive Acquire inside a shared Lock: %v, want a 400 naming mode (no upgrade)", err)
		}
		in, err := c.Acquire(ctx, "doc", client.WithShared())
		if err != nil || in.Holds() != 2 {
			t.Errorf("shared re-entry inside a shared Lock: %v, holds %v", err, in)
		} else {
			in.Release(ctx)
		}
		return nil
	}, client.WithShared(), client.WithWait(0))
	if err != nil {
		t.Fatalf("Lock(WithShared) beside a shared holder: %v", err)
	}
	if r1.Mode() != api.ModeShared {
		t.Errorf("shared lease: Mode() = %q", r1.Mode())
	}
	if _, err := c.Acquire(ctx, "doc", client.WithWait(0)); !errors.As(err, new(*client.InstanceLockError)) {
		t.Errorf("exclusive try-once beside a shared holder: %v, want *InstanceLockError", err)
	}
}
