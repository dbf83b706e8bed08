package sidecar_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/props"
)

// nativeConfig is testConfig with zookeeper.lock.protocol=native (and the
// persistent object nodes it creates).
func nativeConfig(t testing.TB, root, node string) props.Config {
	cfg := testConfig(t, root, node)
	cfg.LockProtocol, cfg.ObjectNode = "native", "persistent"
	return cfg
}

// acquireAsync sends an acquire and delivers its status and body.
func acquireAsync(s *sc, obj, body string) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		st, b := s.call("POST", "/v1/locks/"+obj+"/acquire", body)
		ch <- acquired{st, b}
	}()
	return ch
}

type acquired struct {
	status int
	body   []byte
}

func (s *sc) lockStatus(obj string) api.LockStatus {
	s.t.Helper()
	var st api.LockStatus
	if err := json.Unmarshal(s.mustCall(200, "GET", "/v1/locks/"+obj, ""), &st); err != nil {
		s.t.Fatal(err)
	}
	return st
}

// TestSharedHoldersTogether (native protocol, two sidecars): two shared
// holders on one object at once, shown in holders with their mode; an
// exclusive request is not granted beside them, and once it waits a later
// shared request is not granted ahead of it (no starvation of the writer);
// when the readers release, the writer is granted with a token above
// theirs, and the shared request waiting behind it only after it. A
// shared lease is re-entered only as shared (400 naming mode otherwise).
// /healthz says native.
func TestSharedHoldersTogether(t *testing.T) {
	root := testRoot(t)
	a := start(t, nativeConfig(t, root, "sc-a"))
	b := start(t, nativeConfig(t, root, "sc-b"))
	var h api.Health
	if err := json.Unmarshal(a.mustCall(200, "GET", "/healthz", ""), &h); err != nil || h.LockProtocol != "native" {
		t.Errorf("/healthz lock_protocol = %q (%v), want native", h.LockProtocol, err)
	}
	r1 := a.acquire("o", `{"mode":"shared","info":"r1","wait_ms":30000}`)
	r2 := b.acquire("o", `{"mode":"shared","info":"r2","wait_ms":0}`) // try once: granted beside r1
	if r1.Mode != api.ModeShared || r2.Mode != api.ModeShared {
		t.Errorf("shared leases: modes %q, %q", r1.Mode, r2.Mode)
	}
	st := a.lockStatus("o")
	if len(st.Holders) != 2 || st.Holder == nil || st.Holder.Node != st.Holders[0].Node || len(st.Waiters) != 0 {
		t.Fatalf("status with two shared holders: %+v", st)
	}
	for _, hd := range st.Holders {
		if hd.Mode != api.ModeShared {
			t.Errorf("holder %s: mode %q, want shared", hd.Node, hd.Mode)
		}
	}
	if st, body := b.call("POST", "/v1/locks/o/acquire", `{"wait_ms":0}`); st != 423 {
		t.Fatalf("exclusive try-once beside shared holders: %d %s, want 423", st, body)
	}
	writer := acquireAsync(b, "o", `{"info":"w","wait_ms":60000}`)
	waitFor(t, 20*time.Second, "the writer waiting", func() bool {
		st := a.lockStatus("o")
		return len(st.Waiters) == 1 && st.Waiters[0].Mode == api.ModeExclusive
	})
	if st, body := a.call("POST", "/v1/locks/o/acquire", `{"mode":"shared","wait_ms":0}`); st != 423 {
		t.Fatalf("shared try-once behind a waiting writer: %d %s, want 423 (the writer goes first)", st, body)
	}
	reader := acquireAsync(a, "o", `{"mode":"shared","info":"r3","wait_ms":60000}`)
	waitFor(t, 20*time.Second, "a reader waiting behind the writer", func() bool {
		st := a.lockStatus("o")
		return len(st.Waiters) == 2 && st.Waiters[0].Mode == api.ModeExclusive && st.Waiters[1].Mode == api.ModeShared
	})
	// Re-entry keeps the mode.
	if st, body := a.call("POST", "/v1/locks/o/acquire", `{"lease_id":"`+r1.LeaseID+`"}`); st != 400 || decodeError(t, body).Field != "mode" {
		t.Errorf("re-entry of a shared lease as exclusive: %d %s, want 400 naming mode", st, body)
	}
	if v := a.acquire("o", `{"lease_id":"`+r1.LeaseID+`","mode":"shared"}`); v.Holds != 2 || v.Mode != api.ModeShared {
		t.Errorf("re-entry of a shared lease as shared: holds %d mode %q", v.Holds, v.Mode)
	}
	a.release(r1.LeaseID)
	a.release(r1.LeaseID)
	select {
	case got := <-writer:
		t.Fatalf("writer granted beside a shared holder: %d %s", got.status, got.body)
	default:
	}
	b.release(r2.LeaseID)
	var w api.Lease
	select {
	case got := <-writer:
		if got.status != 200 {
			t.Fatalf("writer: %d %s", got.status, got.body)
		}
		w = decodeLease(t, got.body)
	case <-time.After(30 * time.Second):
		t.Fatal("writer not granted after the readers released")
	}
	if w.Mode != api.ModeExclusive || w.Token <= max(r1.Token, r2.Token) {
		t.Errorf("writer: mode %q token %d, want exclusive above the readers' %d, %d", w.Mode, w.Token, r1.Token, r2.Token)
	}
	select {
	case got := <-reader:
		t.Fatalf("reader granted beside the writer: %d %s", got.status, got.body)
	default:
	}
	if st := a.lockStatus("o"); len(st.Holders) != 1 || st.Holders[0].Mode != api.ModeExclusive || len(st.Waiters) != 1 {
		t.Errorf("status with the writer holding: %+v", st)
	}
	b.release(w.LeaseID)
	select {
	case got := <-reader:
		if got.status != 200 {
			t.Fatalf("reader: %d %s", got.status, got.body)
		}
		r3 := decodeLease(t, got.body)
		if r3.Token <= w.Token {
			t.Errorf("reader after the writer: token %d, want above the writer's %d", r3.Token, w.Token)
		}
		a.release(r3.LeaseID)
	case <-time.After(30 * time.Second):
		t.Fatal("reader not granted after the writer released")
	}
}

// rwChecker is a readers-writer overlap and fencing checker per object:
// a writer inside with anyone else, or a reader inside with a writer, is
// an error; a writer's token must be above every token seen before it on
// the object, a reader's above every writer's before it.
type rwChecker struct {
	mu                 sync.Mutex
	readers, writers   map[string]int
	lastAny, lastWrite map[string]int64
	peakReaders        int
	errs               []string
}

func newRWChecker() *rwChecker {
	return &rwChecker{readers: map[string]int{}, writers: map[string]int{}, lastAny: map[string]int64{}, lastWrite: map[string]int64{}}
}

func (c *rwChecker) enter(obj string, shared bool, token int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if shared {
		c.readers[obj]++
		c.peakReaders = max(c.peakReaders, c.readers[obj])
		if c.writers[obj] > 0 {
			c.errs = append(c.errs, fmt.Sprintf("a reader (token %d) inside %q with a writer", token, obj))
		}
		if token <= c.lastWrite[obj] {
			c.errs = append(c.errs, fmt.Sprintf("reader token %d on %q after writer token %d", token, obj, c.lastWrite[obj]))
		}
	} else {
		c.writers[obj]++
		if c.writers[obj] > 1 || c.readers[obj] > 0 {
			c.errs = append(c.errs, fmt.Sprintf("a writer (token %d) inside %q with %d writers and %d readers", token, obj, c.writers[obj], c.readers[obj]))
		}
		if token <= c.lastAny[obj] {
			c.errs = append(c.errs, fmt.Sprintf("writer token %d on %q after token %d", token, obj, c.lastAny[obj]))
		}
		c.lastWrite[obj] = max(c.lastWrite[obj], token)
	}
	c.lastAny[obj] = max(c.lastAny[obj], token)
}

func (c *rwChecker) leave(obj string, shared bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if shared {
		c.readers[obj]--
	} else {
		c.writers[obj]--
	}
}

func (c *rwChecker) report(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.errs {
		t.Error(e)
	}
}

// TestSharedExclusiveNoOverlap (native protocol, three sidecars): readers
// and writers on two objects in loops, foreground and background, through
// every sidecar, and sets of both objects (one shared, one exclusive, in
// opposite orders), under the readers-writer checker: no writer ever
// overlaps anyone, a writer's token is above every earlier grant's, a
// reader's above every earlier writer's, and every request is granted
// (no deadlock). That readers hold together is TestSharedHoldersTogether's.
func TestSharedExclusiveNoOverlap(t *testing.T) {
	root := testRoot(t)
	var scs []*sc
	for _, n := range []string{"sc-a", "sc-b", "sc-c"} {
		scs = append(scs, start(t, nativeConfig(t, root, n)))
	}
	chk := newRWChecker()
	const rounds = 5
	var wg sync.WaitGroup
	var granted atomic.Int32
	hold := func(via *sc, path, body string, shared bool) {
		st, raw := via.call("POST", path, body)
		if st != 200 {
			t.Errorf("POST %s %s = %d %s", path, body, st, raw)
			return
		}
		l := decodeLease(t, raw)
		if (l.Mode == api.ModeShared) != shared {
			t.Errorf("POST %s %s: mode %q", path, body, l.Mode)
		}
		held := []api.LeaseObject{{Object: l.Object, Token: l.Token}}
		if l.Objects != nil {
			held = l.Objects
		}
		for _, o := range held {
			chk.enter(o.Object, shared, o.Token)
		}
		granted.Add(1)
		time.Sleep(5 * time.Millisecond) // hold it a little: gives overlaps a chance
		for _, o := range held {
			chk.leave(o.Object, shared)
		}
		if st, raw := via.call("DELETE", "/v1/leases/"+l.LeaseID, ""); st != 200 {
			t.Errorf("release %s = %d %s", l.LeaseID, st, raw)
		}
	}
	type worker struct {
		via    *sc
		path   string
		body   string
		shared bool
	}
	var ws []worker
	for i, s := range scs {
		obj := []string{"x", "y"}[i%2]
		ws = append(ws,
			worker{s, "/v1/locks/" + obj + "/acquire", `{"mode":"shared","wait_ms":60000}`, true},
			worker{s, "/v1/locks/" + obj + "/acquire", `{"mode":"shared","type":"background","wait_ms":60000}`, true},
			worker{s, "/v1/locks/" + obj + "/acquire", `{"wait_ms":60000}`, false},
		)
	}
	ws = append(ws, worker{scs[1], "/v1/locks/acquire", `{"objects":["x","y"],"mode":"shared","wait_ms":60000}`, true},
		worker{scs[2], "/v1/locks/acquire", `{"objects":["y","x"],"wait_ms":60000}`, false})
	for _, w := range ws {
		wg.Go(func() {
			for range rounds {
				hold(w.via, w.path, w.body, w.shared)
			}
		})
	}
	wg.Wait()
	chk.report(t)
	if n := int(granted.Load()); n != len(ws)*rounds {
		t.Errorf("%d grants, want %d", n, len(ws)*rounds)
	}
	t.Logf("peak readers inside one object at once: %d", chk.peakReaders)
}

// TestNativeRefusals: what the native protocol refuses, through the
// socket, each a 409 naming zookeeper.lock.protocol: a plugin node under a
// native object (ForeignNode naming the root and the node, never a grant),
// a native object met by a plugin-protocol sidecar on the same root
// (ForeignNode), revocation and preemption (asking, or being preemptible)
// on a native sidecar (NotNative, a preemption field named: refused
// before anything is created, as it could never be carried out).
func TestNativeRefusals(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	n := start(t, nativeConfig(t, root, "sc-native"))
	p := start(t, testConfig(t, root, "sc-plugin"))
	l := n.acquire("fo", `{}`)
	n.release(l.LeaseID)
	plug, err := conn.Create(root+"/fo/A-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	node := plug[strings.LastIndex(plug, "/")+1:]
	st, b := n.call("POST", "/v1/locks/fo/acquire", `{"wait_ms":2000}`)
	if st != 409 {
		t.Fatalf("native acquire with a plugin node under the object: %d %s, want 409", st, b)
	}
	if e := decodeError(t, b); e.Kind != api.ForeignNode || e.Key != "zookeeper.lock.protocol" || !strings.Contains(e.Message, root) ||
		!strings.Contains(e.Message, node) {
		t.Errorf("native acquire with plugin node %s: %+v; want ForeignNode naming the root %s and the node", node, e, root)
	}
	if err := conn.Delete(plug, -1); err != nil {
		t.Fatal(err)
	}
	l = n.acquire("fo", `{"mode":"shared"}`) // granted again once the plugin node is gone
	n.release(l.LeaseID)

	st, b = p.call("POST", "/v1/locks/fo/acquire", `{"wait_ms":2000}`)
	if st != 409 {
		t.Fatalf("plugin-protocol acquire of a native object: %d %s, want 409", st, b)
	}
	if e := decodeError(t, b); e.Kind != api.ForeignNode || !strings.Contains(e.Message, root) {
		t.Errorf("plugin-protocol acquire of a native object: %+v; want ForeignNode naming the root", e)
	}

	l = n.acquire("nr", `{}`)
	for _, c := range []struct{ what, path, body string }{
		{"revoke", "/v1/locks/nr/revoke", `{"reason":"test"}`},
		{"preempt", "/v1/locks/nr/acquire", `{"preempt":true,"wait_ms":3000}`},
		{"preemptible", "/v1/locks/np/acquire", `{"preemptible":true}`},
	} {
		st, b := n.call("POST", c.path, c.body)
		if st != 409 {
			t.Errorf("%s on a native sidecar: %d %s, want 409", c.what, st, b)
			continue
		}
		if e := decodeError(t, b); e.Kind != api.NotNative || e.Key != "zookeeper.lock.protocol" || !strings.Contains(e.Message, "zookeeper.lock.protocol=native") ||
			(c.what != "revoke" && e.Field != c.what) {
			t.Errorf("%s on a native sidecar: %+v; want NotNative naming zookeeper.lock.protocol", c.what, e)
		}
	}
	if v := n.lockStatus("nr"); len(v.Holders) != 1 || v.Holders[0].Token != l.Token {
		t.Errorf("holder after the refusals: %+v, want the lease, untouched", v)
	}
	n.release(l.LeaseID)
}

// Two callers of one native sidecar, one object: the second parks in the
// sidecar (nothing of it in ZooKeeper; /healthz counts it), and the
// first's release grants it with a later token.
func TestNativeParkedCaller(t *testing.T) {
	root := testRoot(t)
	a := start(t, nativeConfig(t, root, "sc-a"))
	first := a.acquire("o", `{"info":"first","wait_ms":30000}`)
	second := acquireAsync(a, "o", `{"info":"second","wait_ms":30000}`)
	waitFor(t, 20*time.Second, "the second caller parked", func() bool {
		var h api.Health
		return json.Unmarshal(a.mustCall(200, "GET", "/healthz", ""), &h) == nil && h.ZooKeeper.Parked == 1 && h.ZooKeeper.Waiting == 1
	})
	if st := a.lockStatus("o"); len(st.Waiters) != 0 || st.Parked != 1 || st.Holder == nil || st.Holder.Info != "first" {
		t.Errorf("status while the second caller is parked: %+v (want the first holding, no waiter in ZooKeeper, one parked)", st)
	}
	a.release(first.LeaseID)
	r := <-second
	if r.status != 200 {
		t.Fatalf("the parked caller: %d %s", r.status, r.body)
	}
	var l api.Lease
	if err := json.Unmarshal(r.body, &l); err != nil {
		t.Fatal(err)
	}
	if l.Token <= first.Token {
		t.Errorf("the parked caller's token %d, not above the first's %d", l.Token, first.Token)
	}
	if st := a.lockStatus("o"); st.Holder == nil || st.Holder.Info != "second" || st.Parked != 0 {
		t.Errorf("status after the handoff: %+v", st)
	}
	a.release(l.LeaseID)
}
