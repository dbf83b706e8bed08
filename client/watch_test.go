package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
)

// TestWatch: Watch yields the current state (free), then the grant with its
// token, then the release, in order; WaitChange with the holder's token
// answers unchanged at the timeout and with an old one at once; a bad
// version is a 400 naming "version".
func TestWatch(t *testing.T) {
	c := newClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const obj = "watch/leader"
	states := make(chan *api.LockWatch, 16)
	errs := make(chan error, 1)
	go func() {
		defer close(states)
		for st, err := range c.Watch(ctx, obj, "") {
			if err != nil {
				errs <- err
				return
			}
			states <- st
		}
	}()
	next := func(what string) *api.LockWatch {
		t.Helper()
		select {
		case st := <-states:
			return st
		case err := <-errs:
			t.Fatalf("Watch, waiting for %s: %v", what, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("Watch never yielded %s", what)
		}
		return nil
	}
	if st := next("the free object"); st.Holder != nil || !st.Changed {
		t.Fatalf("first state %+v, want free", st)
	}
	l, err := c.Acquire(ctx, obj, client.WithInfo("leader-1"))
	if err != nil {
		t.Fatal(err)
	}
	held := next("the holder")
	if held.Holder == nil || held.Holder.Token != l.Token() || held.Holder.Info != "leader-1" {
		t.Fatalf("second state %+v, want held with token %d", held, l.Token())
	}
	tok, old := l.Token(), l.Token()-1
	if st, err := c.WaitChange(ctx, obj, client.Seen{Version: held.Version, Token: &tok}, time.Millisecond); err != nil || st.Changed || st.Version != held.Version {
		t.Fatalf("WaitChange(current) = %+v, %v; want unchanged", st, err)
	}
	if st, err := c.WaitChange(ctx, obj, client.Seen{Token: &old}, time.Minute); err != nil || !st.Changed || st.Holder == nil || st.Holder.Token != tok {
		t.Fatalf("WaitChange(old token) = %+v, %v; want the holder at once", st, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st := next("the release"); st.Holder != nil {
		t.Fatalf("third state %+v, want free", st)
	}
	_, err = c.WaitChange(ctx, obj, client.Seen{Version: "Not A Version"}, 0)
	if ae, ok := errors.AsType[*client.APIError](err); !ok || ae.Status != 400 || ae.Field != "version" {
		t.Fatalf("WaitChange(bad version) = %v, want a 400 naming version", err)
	}
}
