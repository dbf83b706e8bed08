package sidecar_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/api"
)

// Issue 23, operators: a Baton privateLock whose holder's node is gone (an
// orphan of a live session: here a plain client's, as a buggy engine would
// leave it) shows as an orphan with its session in GET /v1/locks/{object},
// and a revocation deletes it at once, through any sidecar. The engine's
// audit counter is exported.
func TestOrphanShownAndRevoked(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	s := start(t, testConfig(t, root, "sc-a"))
	if v := s.metric("baton_orphans_deleted_total"); v != 0 {
		t.Errorf("baton_orphans_deleted_total = %v, want 0", v)
	}
	var paths []string
	for i := 1; i < len(root); i++ {
		if root[i] == '/' {
			paths = append(paths, root[:i])
		}
	}
	for _, p := range append(paths, root, root+"/orph") {
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = conn.Delete(root+"/orph", -1) })
	data := []byte(`{"v":1,"req":"lost-request","sidecar":"sc-ghost","type":"foreground"}`)
	pl := root + "/orph/privateLock"
	if _, err := conn.Multi(
		&zk.CreateRequest{Path: pl, Data: data, Acl: zk.WorldACL(zk.PermAll), Flags: zk.FlagEphemeral},
		&zk.SetDataRequest{Path: pl, Data: data, Version: 0},
		&zk.SetDataRequest{Path: root + "/orph", Data: nil, Version: -1},
	); err != nil {
		t.Fatal(err)
	}
	// A try-once acquire is refused: the orphan blocks the object.
	s.mustCall(423, "POST", "/v1/locks/orph/acquire", `{"wait_ms":0}`)
	var st api.LockStatus
	if err := json.Unmarshal(s.mustCall(200, "GET", "/v1/locks/orph", ""), &st); err != nil {
		t.Fatal(err)
	}
	wantSess := fmt.Sprintf("0x%x", conn.SessionID())
	if st.Holder == nil || !st.Holder.Orphan || st.Holder.Session != wantSess || st.Holder.Sidecar != "sc-ghost" {
		t.Fatalf("GET /v1/locks/orph holder = %+v, want an orphan of session %s", st.Holder, wantSess)
	}
	var rr api.RevokeResponse
	if err := json.Unmarshal(s.mustCall(202, "POST", "/v1/locks/orph/revoke", `{"reason":"orphan since the cut"}`), &rr); err != nil {
		t.Fatal(err)
	}
	if !rr.Orphan || rr.Holder == nil || rr.Holder.Session != wantSess || rr.FreedAfter == nil {
		t.Errorf("revoke answer = %+v, want orphan", rr)
	}
	if _, _, err := conn.Get(pl); err != zk.ErrNoNode {
		t.Fatalf("the orphan privateLock after the revocation: %v, want gone", err)
	}
	l := s.acquire("orph", `{"wait_ms":0}`)
	// A held lease is not an orphan, and revoking it is the usual revocation.
	var st2 api.LockStatus
	if err := json.Unmarshal(s.mustCall(200, "GET", "/v1/locks/orph", ""), &st2); err != nil {
		t.Fatal(err)
	}
	if st2.Holder == nil || st2.Holder.Orphan || st2.Holder.Session != "" || st2.Holder.Node == "" {
		t.Errorf("a lease's holder = %+v, want no orphan", st2.Holder)
	}
	var rr2 api.RevokeResponse
	if err := json.Unmarshal(s.mustCall(202, "POST", "/v1/locks/orph/revoke", `{"reason":"x"}`), &rr2); err != nil || rr2.Orphan || !strings.HasPrefix(rr2.Reason, "revoked") { // Local may be false: the watch can end the lease first
		t.Errorf("revoke of a lease = %+v, %v", rr2, err)
	}
	if e := decodeError(t, s.mustCall(410, "POST", "/v1/leases/"+l.LeaseID+"/renew", "")); e.Kind != api.LockLost {
		t.Errorf("renew after the revocation: %+v", e)
	}
}
