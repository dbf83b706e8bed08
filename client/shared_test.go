package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
)

// TestSharedOnPlugin: WithShared against a plugin-protocol sidecar is a
// 409 *APIError of kind SharedNeedsNative naming zookeeper.lock.protocol
// (not an InstanceLockError: waiting would not help); an exclusive lease
// says its mode.
func TestSharedOnPlugin(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	_, err := c.Acquire(ctx, "shp-1", client.WithShared())
	ae, ok := errors.AsType[*client.APIError](err)
	if !ok || ae.Status != http.StatusConflict || ae.Kind != api.SharedNeedsNative || ae.Key != "zookeeper.lock.protocol" {
		t.Fatalf("Acquire(WithShared) on a plugin sidecar: %v, want a 409 SharedNeedsNative naming zookeeper.lock.protocol", err)
	}
	if _, ok := errors.AsType[*client.InstanceLockError](err); ok {
		t.Errorf("Acquire(WithShared) on a plugin sidecar is an InstanceLockError: %v", err)
	}
	l, err := c.Acquire(ctx, "shp-1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Mode() != api.ModeExclusive {
		t.Errorf("exclusive lease: Mode() = %q", l.Mode())
	}
}
