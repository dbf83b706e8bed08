package sidecar_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/batonhq/baton/api"
)

// TestStrictJSON: request bodies match keys exactly (a case variant is an
// unknown field, the right name suggested) and refuse a key given twice,
// each a 400 naming the key; a fencing token takes a decimal string or a
// whole JSON number, and anything else is a 400 naming token and saying
// what it takes, never encoding/json's ",string struct tag" text (issue 18
// §7, issue 20 item 4). Nothing is granted or revoked by a refused body.
func TestStrictJSON(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	s := start(t, testConfig(t, root, "sc-a"))
	acq, rv := "/v1/locks/o/acquire", "/v1/locks/held/revoke"
	held := s.acquire("held", `{"wait_ms":1000}`)
	for _, c := range []struct {
		name, path, body string
		field, says      string
	}{
		{"the issue's body", acq, `{"PREEMPT":true,"preempt":false,"preempt":true}`, "PREEMPT", `case-sensitive; did you mean "preempt"?`},
		{"duplicate", acq, `{"preempt":false,"preempt":true}`, "preempt", "given twice"},
		{"duplicate same value", acq, `{"wait_ms":100,"wait_ms":100}`, "wait_ms", "given twice"},
		{"case variant", acq, `{"Wait_Ms":100}`, "Wait_Ms", `did you mean "wait_ms"?`},
		{"upper case type", acq, `{"TYPE":"background"}`, "TYPE", `did you mean "type"?`},
		{"renew duplicate", "/v1/leases/" + held.LeaseID + "/renew", `{"lease_ms":1000,"lease_ms":600000}`, "lease_ms", "given twice"},
		{"renew case", "/v1/leases/" + held.LeaseID + "/renew", `{"LEASE_MS":1000}`, "LEASE_MS", `did you mean "lease_ms"?`},
		{"revoke duplicate reason", rv, `{"reason":"a","reason":"b"}`, "reason", "given twice"},
		{"revoke case token", rv, `{"Token":"1"}`, "Token", `did you mean "token"?`},
		{"drain key", "/v1/drain", `{"Draining":true}`, "Draining", "unknown field"},
		{"token fraction", rv, `{"token":1.5}`, "token", `want a decimal string like "81" (a whole JSON number is accepted too), got 1.5`},
		{"token exponent", rv, `{"token":1e3}`, "token", "got 1e3"},
		{"token beyond int64", rv, `{"token":9223372036854775808}`, "token", "got 9223372036854775808"},
		{"token string beyond int64", rv, `{"token":"99999999999999999999"}`, "token", `got "99999999999999999999"`},
		{"token text", rv, `{"token":"abc"}`, "token", `got "abc"`},
		{"token leading zero", rv, `{"token":"01"}`, "token", `got "01"`},
		{"token spaces", rv, `{"token":" 1"}`, "token", `got " 1"`},
		{"token bool", rv, `{"token":true}`, "token", "got true"},
		{"token object", rv, `{"token":{"a":1}}`, "token", "got an object"},
		{"token array", rv, `{"token":[1]}`, "token", "got an array"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, b := s.call("POST", c.path, c.body)
			if st != 400 {
				t.Fatalf("POST %s %s = %d %s, want 400", c.path, c.body, st, b)
			}
			e := decodeError(t, b)
			if e.Kind != api.BadRequest || e.Field != c.field || !strings.HasPrefix(e.Message, c.field+": ") || !strings.Contains(e.Message, c.says) {
				t.Errorf("POST %s %s = %s field %q: %q; want field %q saying %q", c.path, c.body, e.Kind, e.Field, e.Message, c.field, c.says)
			}
			if strings.Contains(e.Message, "json:") || strings.Contains(e.Message, "struct tag") {
				t.Errorf("message leaks encoding/json: %q", e.Message)
			}
		})
	}
	// Nothing was granted, renewed past the lease or revoked.
	if st, b := s.call("GET", "/v1/locks/o", ""); st != 200 || strings.Contains(string(b), `"node"`) {
		t.Errorf("o after refused acquires: %d %s, want free", st, b)
	}
	var l api.Lease
	if err := json.Unmarshal(s.mustCall(200, "GET", "/v1/leases/"+held.LeaseID, ""), &l); err != nil || l.State != api.StateHeld {
		t.Fatalf("held lease after refused revokes: %+v, %v; want held", l, err)
	}

	// A whole JSON number is the token it spells: a wrong one revokes
	// nothing (404), the right one revokes that grant.
	e := decodeError(t, s.mustCall(404, "POST", rv, fmt.Sprintf(`{"token":%d}`, held.Token+1)))
	if !strings.Contains(e.Message, fmt.Sprintf("token %d", held.Token+1)) {
		t.Errorf("revoke with a wrong numeric token: %q, want it to name token %d", e.Message, held.Token+1)
	}
	var rr api.RevokeResponse
	if err := json.Unmarshal(s.mustCall(202, "POST", rv, fmt.Sprintf(`{"reason":"n","token":%d}`, held.Token)), &rr); err != nil || rr.Token != held.Token {
		t.Errorf("revoke with the numeric token %d = %+v, %v", held.Token, rr, err)
	}
	// Exact keys, once each, still work; the string form too.
	s.release(s.acquire("o", `{"wait_ms":1000,"type":"background","preemptible":true}`).LeaseID)
	s.mustCall(404, "POST", "/v1/locks/free/revoke", `{"token":"5"}`)
	assertNoLeftovers(t, conn, root+"/o")
}
