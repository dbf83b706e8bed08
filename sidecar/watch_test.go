package sidecar_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/testenv"
)

// watchCall is GET /v1/locks/{obj}?query on s, decoded strictly.
func (s *sc) watchCall(ctx context.Context, obj, query string) (api.LockWatch, error) {
	st, b := testenv.Call(ctx, s.hc, "GET", "/v1/locks/"+url.PathEscape(obj)+"?"+query, "")
	if st != 200 {
		return api.LockWatch{}, fmt.Errorf("GET ?%s: %d %s", query, st, b)
	}
	var v api.LockWatch
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil || v.Version == "" || v.Object != obj {
		return api.LockWatch{}, fmt.Errorf("not a LockWatch of %q: %s (%v)", obj, b, err)
	}
	return v, nil
}

func (s *sc) mustWatch(obj, query string) api.LockWatch {
	s.t.Helper()
	v, err := s.watchCall(context.Background(), obj, query)
	if err != nil {
		s.t.Fatal(err)
	}
	return v
}

func watchLine(v api.LockWatch) string {
	var b strings.Builder
	if v.Holder == nil {
		b.WriteString("free")
	} else {
		fmt.Fprintf(&b, "held %d on %s (%s) since %s", v.Holder.Token, v.Holder.Sidecar, v.Holder.Info, v.Holder.Since.Format(api.TimeFormat))
	}
	for _, w := range v.Waiters {
		fmt.Fprintf(&b, ", waiting %s on %s", w.Info, w.Sidecar)
	}
	return b.String()
}

// TestWatchLongPoll: a watcher long-polling sidecar B, chaining versions,
// sees a grant through sidecar A, a waiter through B, the handoff to it
// and the release, in order, with who (sidecar, info), token and since.
func TestWatchLongPoll(t *testing.T) {
	root := testRoot(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	const obj = "leader/1"
	esc := url.PathEscape(obj)
	first := b.mustWatch(obj, "wait=change")
	if !first.Changed || first.Holder != nil || len(first.Waiters) != 0 {
		t.Fatalf("first watch of a missing object: %+v, want free and changed", first)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	states := make(chan api.LockWatch, 100)
	var wg sync.WaitGroup
	wg.Go(func() {
		v := first.Version
		for ctx.Err() == nil {
			w, err := b.watchCall(ctx, obj, "wait=change&timeout_ms=10000&version="+v)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			if w.Changed {
				states <- w
				v = w.Version
			} else if w.Version != v {
				t.Errorf("unchanged answer with version %s, asked after %s", w.Version, v)
			}
		}
	})
	var seen []api.LockWatch
	until := func(what string, cond func(api.LockWatch) bool) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case w := <-states:
				seen = append(seen, w)
				if cond(w) {
					return
				}
			case <-timeout:
				t.Fatalf("the watcher never saw %s; saw %d states", what, len(seen))
			}
		}
	}
	la := a.acquire(esc, `{"info":"leader-a","lease_ms":60000,"wait_ms":30000}`)
	until("a holding", func(w api.LockWatch) bool { return w.Holder != nil && w.Holder.Token == la.Token })
	got := make(chan api.Lease, 1)
	go func() {
		st, body := b.call("POST", "/v1/locks/"+esc+"/acquire", `{"info":"leader-b","lease_ms":60000,"wait_ms":30000}`)
		if st != 200 {
			t.Errorf("b's acquire: %d %s", st, body)
		}
		var l api.Lease
		_ = json.Unmarshal(body, &l)
		got <- l
	}()
	until("b waiting", func(w api.LockWatch) bool { return len(w.Waiters) == 1 && w.Waiters[0].Info == "leader-b" })
	a.release(la.LeaseID)
	lb := <-got
	until("b holding", func(w api.LockWatch) bool { return w.Holder != nil && w.Holder.Token == lb.Token })
	b.release(lb.LeaseID)
	until("free", func(w api.LockWatch) bool { return w.Holder == nil && len(w.Waiters) == 0 })
	cancel()
	wg.Wait()

	var holders []string
	for _, w := range seen {
		t.Logf("%s: %s", w.Version, watchLine(w))
		if w.Holder == nil {
			continue
		}
		h := fmt.Sprintf("%d %s %s", w.Holder.Token, w.Holder.Sidecar, w.Holder.Info)
		if len(holders) == 0 || holders[len(holders)-1] != h {
			holders = append(holders, h)
		}
		if w.Holder.Since.IsZero() {
			t.Errorf("holder without since: %s", watchLine(w))
		}
	}
	want := []string{fmt.Sprintf("%d sc-a leader-a", la.Token), fmt.Sprintf("%d sc-b leader-b", lb.Token)}
	if fmt.Sprint(holders) != fmt.Sprint(want) {
		t.Errorf("holders seen %q, want %q", holders, want)
	}
}

// TestWatchAfterToken: right after a new grant's acquire returned on one
// sidecar, a watch with after=<the old token> answers the new holder at
// once on both sidecars, and one with after=<the new token> and
// timeout_ms=0 answers unchanged: a sidecar's watch never answers a state
// older than what its caller already knew.
func TestWatchAfterToken(t *testing.T) {
	root := testRoot(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	side := [2]*sc{a, b}
	const obj = "after-token"
	old := a.acquire(obj, `{"lease_ms":60000,"wait_ms":30000}`)
	for _, s := range side { // each sidecar watches the object from now on
		if w := s.mustWatch(obj, "wait=change&timeout_ms=0&after=0"); !w.Changed || w.Holder == nil || w.Holder.Token != old.Token {
			t.Fatalf("%s: after=0 with a holder: %s changed %v", s.cfg.NodeID, watchLine(w), w.Changed)
		}
	}
	for i := range 10 {
		side[i%2].release(old.LeaseID)
		next := side[(i+1)%2].acquire(obj, `{"lease_ms":60000,"wait_ms":30000}`)
		for _, s := range side {
			q := fmt.Sprintf("wait=change&timeout_ms=0&after=%d", old.Token)
			if w := s.mustWatch(obj, q); !w.Changed || w.Holder == nil || w.Holder.Token != next.Token {
				t.Fatalf("round %d, %s: after=old right after the new grant %d: %s changed %v", i, s.cfg.NodeID, next.Token, watchLine(w), w.Changed)
			}
			q = fmt.Sprintf("wait=change&timeout_ms=0&after=%d", next.Token)
			if w := s.mustWatch(obj, q); w.Changed || w.Holder == nil || w.Holder.Token != next.Token {
				t.Fatalf("round %d, %s: after=new: %s changed %v, want unchanged", i, s.cfg.NodeID, watchLine(w), w.Changed)
			}
		}
		old = next
	}
	side[0].release(old.LeaseID)
}

// TestWatchSharesOneWatch: 20 long-polls on one object through one sidecar
// cost one ZooKeeper watch (the engine sets it again a few times per
// change, not once per caller); they count against
// sidecar.max.polls.per.uid (the 21st is a 429 naming it); all 20 wake on
// one grant through another sidecar, with its token.
func TestWatchSharesOneWatch(t *testing.T) {
	root := testRoot(t)
	const n = 20
	a := start(t, testConfig(t, root, "sc-a"))
	cfg := testConfig(t, root, "sc-b")
	cfg.MaxPollsPerUID = n
	b := start(t, cfg)
	const obj = "shared-watch"
	cur := b.mustWatch(obj, "wait=change")
	eng := b.srv.Engine()
	before := eng.WatchStats()
	answers := make(chan api.LockWatch, n)
	for range n {
		go func() {
			w, err := b.watchCall(context.Background(), obj, "wait=change&timeout_ms=60000&version="+cur.Version)
			if err != nil {
				t.Error(err)
			}
			answers <- w
		}()
	}
	waitFor(t, 30*time.Second, "20 long-polls waiting", func() bool { return eng.WatchStats().Waiters == n })
	st, body := b.call("GET", "/v1/locks/"+obj+"?wait=change&timeout_ms=60000&version="+cur.Version, "")
	if e := decodeError(t, body); st != 429 || e.Kind != api.TooManyRequests || e.Key != "sidecar.max.polls.per.uid" {
		t.Errorf("long-poll %d: %d %s, want 429 naming sidecar.max.polls.per.uid", n+1, st, body)
	}
	l := a.acquire(obj, `{"lease_ms":60000,"wait_ms":30000}`)
	for range n {
		if w := <-answers; !w.Changed || w.Holder == nil || w.Holder.Token != l.Token {
			t.Fatalf("a long-poll answered %s changed %v, want the holder %d", watchLine(w), w.Changed, l.Token)
		}
	}
	after := eng.WatchStats()
	if after.Objects != 1 {
		t.Errorf("%d objects watched, want 1", after.Objects)
	}
	if arms := after.Arms - before.Arms; arms > 8 {
		t.Errorf("%d watches set for one change and %d long-polls, want at most 8", arms, n)
	}
	t.Logf("%d long-polls, one grant: %d watches set, %d states published", n, after.Arms-before.Arms, after.Versions-before.Versions)
	a.release(l.LeaseID)
}

// TestWatchBadParams: every bad query is a 400 naming its parameter.
func TestWatchBadParams(t *testing.T) {
	root := testRoot(t)
	s := start(t, testConfig(t, root, "sc-a"))
	for _, c := range []struct{ query, field string }{
		{"after=5", "after"},
		{"version=7", "version"},
		{"timeout_ms=5", "timeout_ms"},
		{"wait=lost", "wait"},
		{"wait=", "wait"},
		{"wait=change&wait=change", "wait"},
		{"wait=change&after=-1", "after"},
		{"wait=change&after=x", "after"},
		{"wait=change&after=%2B5", "after"},
		{"wait=change&after=", "after"},
		{"wait=change&version=", "version"},
		{"wait=change&version=ABC", "version"},
		{"wait=change&version=" + strings.Repeat("1", 65), "version"},
		{"wait=change&timeout_ms=600001", "timeout_ms"},
		{"wait=change&timeout_ms=-1", "timeout_ms"},
		{"wait=change&timeout_ms=1s", "timeout_ms"},
		{"wait=change&foo=1", "foo"},
	} {
		st, body := s.call("GET", "/v1/locks/x?"+c.query, "")
		if e := decodeError(t, body); st != 400 || e.Kind != api.BadRequest || e.Field != c.field {
			t.Errorf("GET ?%s = %d %s, want 400 naming %s", c.query, st, body, c.field)
		}
	}
	if st, body := s.call("GET", "/v1/locks/x?wait=change&timeout_ms=0", ""); st != 200 {
		t.Errorf("a good watch: %d %s", st, body)
	}
}
