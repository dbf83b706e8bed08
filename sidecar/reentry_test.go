package sidecar_test

import (
	"encoding/json"
	"testing"

	"github.com/batonhq/baton/api"
)

// TestReentry: an acquire naming a lease this sidecar holds on the object
// gets that lease back (same id, same token) with holds 2, shown by GET
// /v1/locks/{object}; the first release counts down and keeps the lock
// (another sidecar still cannot take it), the second frees it, a third is
// 404. Lease ids of another object, another sidecar, or none are 400s
// naming lease_id, and change nothing.
func TestReentry(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	l1 := a.acquire("re", `{"lease_ms":60000}`)
	if l1.Holds != 1 {
		t.Fatalf("first acquire: holds %d, want 1", l1.Holds)
	}
	l2 := a.acquire("re", `{"lease_id":"`+l1.LeaseID+`"}`)
	if l2.LeaseID != l1.LeaseID || l2.Token != l1.Token || l2.Holds != 2 || l2.State != api.StateHeld {
		t.Fatalf("re-entry = %+v, want lease %s token %d holds 2", l2, l1.LeaseID, l1.Token)
	}
	var st api.LockStatus
	if err := json.Unmarshal(a.mustCall(200, "GET", "/v1/locks/re", ""), &st); err != nil || st.Holder == nil {
		t.Fatalf("inspect: %+v %v", st, err)
	}
	if st.Holder.Holds != 2 || st.Holder.Token != l1.Token {
		t.Errorf("inspect holder = %+v, want holds 2, token %d", st.Holder, l1.Token)
	}
	if g := decodeLease(t, a.mustCall(200, "GET", "/v1/leases/"+l1.LeaseID, "")); g.Holds != 2 {
		t.Errorf("lease body holds = %d, want 2", g.Holds)
	}

	// Bad lease ids: 400 naming lease_id.
	other := b.acquire("other", `{}`)
	mine := a.acquire("mine", `{}`)
	for name, id := range map[string]string{
		"another sidecar": other.LeaseID,
		"another object":  mine.LeaseID,
		"never granted":   "0123456789abcdef.0123456789abcdef0123456789abcdef",
		"not an id":       "nope",
		"op not running":  "op:0190a0a0-0000-7000-8000-000000000000:1",
	} {
		e := decodeError(t, a.mustCall(400, "POST", "/v1/locks/re/acquire", `{"lease_id":"`+id+`"}`))
		if e.Kind != api.BadRequest || e.Field != "lease_id" {
			t.Errorf("%s: %+v, want BadRequest on lease_id", name, e)
		}
		t.Logf("%s: %s", name, e.Message)
	}
	b.release(other.LeaseID)
	a.release(mine.LeaseID)

	var rel api.ReleaseResponse
	if err := json.Unmarshal(a.mustCall(200, "DELETE", "/v1/leases/"+l1.LeaseID, ""), &rel); err != nil {
		t.Fatal(err)
	}
	if rel.Released || rel.Holds != 1 {
		t.Errorf("first release = %+v, want released false, holds 1", rel)
	}
	// Still held: another sidecar is refused, the lease renews.
	a.mustCall(200, "POST", "/v1/leases/"+l1.LeaseID+"/renew", "")
	if st, body := b.call("POST", "/v1/locks/re/acquire", `{"wait_ms":0}`); st != 423 {
		t.Fatalf("acquire on sc-b with one hold left = %d %s, want 423", st, body)
	}
	if err := json.Unmarshal(a.mustCall(200, "DELETE", "/v1/leases/"+l1.LeaseID, ""), &rel); err != nil {
		t.Fatal(err)
	}
	if !rel.Released || rel.Holds != 0 || rel.Token != l1.Token {
		t.Errorf("second release = %+v, want released, holds 0", rel)
	}
	if e := decodeError(t, a.mustCall(404, "DELETE", "/v1/leases/"+l1.LeaseID, "")); e.Kind != api.NoNode {
		t.Errorf("third release: %+v, want 404 NoNode", e)
	}
	// Freed: sc-b takes it at once.
	lb := b.acquire("re", `{"wait_ms":0}`)
	if lb.Token <= l1.Token {
		t.Errorf("next grant's token %d not above %d", lb.Token, l1.Token)
	}
	b.release(lb.LeaseID)
}
