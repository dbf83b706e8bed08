package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/batonhq/baton/client"
)

// TestCheck: Check and RequireCurrent answer current for the grant's token
// and stale (a *StaleTokenError naming the current token) for the previous
// grant's, right after the new acquire returns; a bad token is a 400 naming
// "token".
func TestCheck(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	const obj = "fence/row-1"
	l1, err := c.Acquire(ctx, obj)
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.Check(ctx, obj, l1.Token())
	if err != nil || !v.Current || v.Token != l1.Token() || v.ValidForMS == nil {
		t.Fatalf("Check(current) = %+v, %v; want current, token %d, valid_for_ms from the holder's sidecar", v, err, l1.Token())
	}
	if err := c.RequireCurrent(ctx, obj, l1.Token()); err != nil {
		t.Fatalf("RequireCurrent(current) = %v", err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	err = c.RequireCurrent(ctx, obj, l1.Token())
	if ste, ok := errors.AsType[*client.StaleTokenError](err); !ok || !errors.Is(err, client.ErrStaleToken) || ste.Current != 0 {
		t.Fatalf("RequireCurrent after release = %v, want a *StaleTokenError with the object free", err)
	}
	l2, err := c.Acquire(ctx, obj)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	err = c.RequireCurrent(ctx, obj, l1.Token())
	if ste, ok := errors.AsType[*client.StaleTokenError](err); !ok || ste.Current != l2.Token() || ste.Token != l1.Token() {
		t.Fatalf("RequireCurrent(old) after a new grant = %v, want a *StaleTokenError naming token %d", err, l2.Token())
	}
	_, err = c.Check(ctx, obj, 0)
	if ae, ok := errors.AsType[*client.APIError](err); !ok || ae.Status != 400 || ae.Field != "token" {
		t.Fatalf("Check(token 0) = %v, want a 400 *APIError naming token", err)
	}
}

// Storage code checks the writer's fencing token before it writes on its
// behalf.
func ExampleClient_RequireCurrent() {
	ctx := context.Background()
	c := client.New(socketPath)
	defer c.Close()
	l, err := c.Acquire(ctx, "invoice-9")
	if err != nil {
		fmt.Println(err)
		return
	}
	token := l.Token() // sent along with the write
	l.Release(ctx)

	// In the storage service, before the write:
	err = c.RequireCurrent(ctx, "invoice-9", token)
	fmt.Println("stale:", errors.Is(err, client.ErrStaleToken))
	// Output:
	// stale: true
}
