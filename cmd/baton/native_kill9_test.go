package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
)

// testNativeKill9MidHandoff: on a native root, the holder's `baton serve`
// is killed with SIGKILL while the holder's release is in flight, with a
// caller of another sidecar queued behind it and, in every other round, a
// second caller of the killed sidecar parked behind the holder (the
// release's write would grant it). Whether the write landed or not:
//   - the caller of the other sidecar is granted, within a session timeout
//     and a few seconds, with a token above the holder's;
//   - a parked caller told it was granted before the kill (its sidecar's
//     answer came first) holds a lower token, and the other sidecar's
//     grant comes after the instant it was told its lock was valid until;
//   - when the other sidecar's caller releases, nothing is left under the
//     object but the native sentinel (the dead session's nodes are gone).
func testNativeKill9MidHandoff(t *testing.T, e *env) {
	extra := map[string]string{"zookeeper.lock.root": e2eRoot + "-nk9", "zookeeper.lock.protocol": "native",
		"zookeeper.object.node": "persistent", "zookeeper.session.timeout": "2000"}
	b := e.startSidecar(t, "nk9-b", extra)
	defer b.stop(t)
	bc := client.New(b.socket)
	defer bc.Close()
	zc := e.zkConn(t)
	ctx := context.Background()
	acquireAsync := func(c *client.Client, obj string) chan grantResult {
		ch := make(chan grantResult, 1)
		go func() {
			l, err := c.Acquire(ctx, obj, client.WithWait(60*time.Second), client.WithLease(time.Minute))
			ch <- grantResult{l, err, time.Now(), false}
		}()
		return ch
	}
	await := func(ch chan grantResult, who string) grantResult {
		t.Helper()
		select {
		case g := <-ch:
			return g
		case <-time.After(45 * time.Second):
			t.Fatalf("%s: no answer 45 s after the holder's sidecar was killed", who)
		}
		return grantResult{}
	}
	for round := range 4 {
		obj := fmt.Sprintf("nk9-%d", round)
		parking := round%2 == 0
		a := e.startSidecar(t, fmt.Sprintf("nk9-a%d", round), extra)
		ac, pc := client.New(a.socket), client.New(a.socket)
		h, err := ac.Acquire(ctx, obj, client.WithLease(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		var pch chan grantResult
		if parking {
			pch = acquireAsync(pc, obj)
			waitCond(t, 30*time.Second, "the second caller parked", func() bool {
				st, err := ac.Inspect(ctx, obj)
				return err == nil && st.Parked == 1
			})
		}
		wch := acquireAsync(bc, obj)
		waitCond(t, 30*time.Second, "the other sidecar's caller queued", func() bool { return waitersOf(t, b.socket, obj) == 1 })
		go func() { _ = h.Release(ctx) }()
		time.Sleep(time.Duration(round/2) * time.Millisecond)
		a.kill9(t)
		killed := time.Now()
		w := await(wch, "the other sidecar's caller")
		if w.err != nil {
			t.Fatalf("round %d: the other sidecar's caller: %v", round, w.err)
		}
		t.Logf("round %d (parked caller: %v): granted on the other sidecar %v after the kill, token %d (holder's %d)",
			round, parking, w.at.Sub(killed).Round(time.Millisecond), w.l.Token(), h.Token())
		if w.l.Token() <= h.Token() {
			t.Errorf("round %d: token %d granted after the holder's %d", round, w.l.Token(), h.Token())
		}
		if parking {
			if p := await(pch, "the parked caller"); p.err == nil {
				t.Logf("round %d: the parked caller was told it was granted (token %d) before the kill", round, p.l.Token())
				if p.l.Token() >= w.l.Token() || !w.at.After(p.l.ValidUntil()) {
					t.Errorf("round %d: parked caller granted token %d valid until %v; the other sidecar's grant (token %d) at %v",
						round, p.l.Token(), p.l.ValidUntil(), w.l.Token(), w.at)
				}
			}
		}
		ac.Close()
		pc.Close()
		if err := w.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		kids, _, err := zc.Children(e2eRoot + "-nk9/" + obj)
		if err != nil || !slices.Equal(kids, []string{"privateLock"}) {
			t.Errorf("round %d: left under the object after the last release: %v %v", round, kids, err)
		}
	}
}
