package sidecar_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/batonhq/baton/api"
)

// TestSharedOnPluginRefused: a shared acquire through the socket of a
// plugin-protocol sidecar (the default) is a 409 SharedNeedsNative naming
// zookeeper.lock.protocol=native and why (one privateLock holder), for one
// object and for a set; nothing is left in ZooKeeper, the refusal is
// counted as refused, /healthz says the protocol, and an exclusive acquire
// still works and says its mode.
func TestSharedOnPluginRefused(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	s := start(t, testConfig(t, root, "sc-a"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })
	for _, c := range []struct{ path, body string }{
		{"/v1/locks/o/acquire", `{"mode":"shared","wait_ms":1000}`},
		{"/v1/locks/acquire", `{"objects":["o","p"],"mode":"shared","wait_ms":1000}`},
	} {
		st, b := s.call("POST", c.path, c.body)
		if st != 409 {
			t.Fatalf("POST %s %s = %d %s, want 409", c.path, c.body, st, b)
		}
		e := decodeError(t, b)
		if e.Kind != api.SharedNeedsNative || e.Key != "zookeeper.lock.protocol" ||
			!strings.Contains(e.Message, "zookeeper.lock.protocol=native") || !strings.Contains(e.Message, "one holder") {
			t.Errorf("POST %s %s = %+v; want SharedNeedsNative naming zookeeper.lock.protocol=native and the one holder", c.path, c.body, e)
		}
	}
	if kids := nodesUnder(t, conn, root); len(kids) != 0 {
		t.Errorf("nodes after refused shared acquires: %v", kids)
	}
	if n := s.metric("baton_lock_acquire_seconds", "type=foreground", "result=refused"); n != 2 {
		t.Errorf("baton_lock_acquire_seconds{type=foreground,result=refused} = %v, want 2", n)
	}
	var h api.Health
	if err := json.Unmarshal(s.mustCall(200, "GET", "/healthz", ""), &h); err != nil || h.LockProtocol != "plugin" {
		t.Errorf("/healthz lock_protocol = %q (%v), want plugin", h.LockProtocol, err)
	}
	l := s.acquire("o", `{"mode":"exclusive"}`)
	if l.Mode != api.ModeExclusive {
		t.Errorf("exclusive lease: mode %q", l.Mode)
	}
	s.release(l.LeaseID)
}

// TestReentryKeepsMode: a re-entry must ask for the lease's own mode: an
// exclusive lease re-entered with "mode":"shared" is a 400 naming mode
// (the holds do not move); without a mode (exclusive) it is re-entered.
func TestReentryKeepsMode(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	s := start(t, testConfig(t, root, "sc-a"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })
	l := s.acquire("o", `{}`)
	st, b := s.call("POST", "/v1/locks/o/acquire", `{"lease_id":"`+l.LeaseID+`","mode":"shared"}`)
	if st != 400 {
		t.Fatalf("re-entry of an exclusive lease as shared = %d %s, want 400", st, b)
	}
	if e := decodeError(t, b); e.Field != "mode" || !strings.Contains(e.Message, "exclusive lock") || !strings.Contains(e.Message, "keeps the lease's mode") {
		t.Errorf("re-entry of an exclusive lease as shared: %+v, want a 400 naming mode and why", e)
	}
	if v := s.acquire("o", `{"lease_id":"`+l.LeaseID+`","mode":"exclusive"}`); v.Holds != 2 || v.Mode != api.ModeExclusive {
		t.Errorf("re-entry as exclusive: holds %d mode %q, want 2 (the refused one added none), exclusive", v.Holds, v.Mode)
	}
	s.release(l.LeaseID)
	s.release(l.LeaseID)
}
