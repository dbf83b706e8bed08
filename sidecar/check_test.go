package sidecar_test

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strconv"
	"testing"

	"github.com/batonhq/baton/api"
)

// checkToken calls GET /v1/locks/{object}/check?token=tok on s and decodes
// the answer strictly.
func (s *sc) checkToken(obj string, tok int64) api.CheckResult {
	s.t.Helper()
	b := s.mustCall(200, "GET", "/v1/locks/"+url.PathEscape(obj)+"/check?token="+strconv.FormatInt(tok, 10), "")
	var v api.CheckResult
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		s.t.Fatalf("not a CheckResult: %s (%v)", b, err)
	}
	return v
}

// TestCheckFencing: the fencing check answers from any sidecar, through
// ZooKeeper: current for the grant's token, stale for any other, and stale
// for an old token as soon as a new grant's acquire has returned (checked
// at once, on both sidecars, many times over). Only the holder's sidecar
// gives valid_for_ms. The object's name has a "/" (sent as %2F).
func TestCheckFencing(t *testing.T) {
	root := testRoot(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	const obj = "tenant/7/check"
	esc := url.PathEscape(obj)

	if v := b.checkToken(obj, 1); v.Current || v.Token != 0 || v.ValidForMS != nil {
		t.Fatalf("check of a free object = %+v, want not current, no token, no valid_for_ms", v)
	}
	l := a.acquire(esc, `{"lease_ms":60000,"wait_ms":30000}`)
	v := b.checkToken(obj, l.Token)
	if !v.Current || v.Token != l.Token || v.ValidForMS != nil {
		t.Fatalf("check through sidecar B of A's grant %d = %+v, want current with token %d and no valid_for_ms (B does not know what A told)", l.Token, v, l.Token)
	}
	if v := b.checkToken(obj, l.Token-1); v.Current || v.Token != l.Token {
		t.Fatalf("check of token-1 = %+v, want stale with the current token %d", v, l.Token)
	}
	if v := b.checkToken(obj, l.Token+1); v.Current || v.Token != l.Token {
		t.Fatalf("check of token+1 = %+v, want stale with the current token %d", v, l.Token)
	}
	v = a.checkToken(obj, l.Token)
	if !v.Current || v.Token != l.Token || v.ValidForMS == nil || *v.ValidForMS > l.ValidForMS {
		t.Fatalf("check through the holder's sidecar = %+v (valid_for_ms %v), want current with valid_for_ms at most the %d ms told", v, v.ValidForMS, l.ValidForMS)
	}

	// Release, then a new grant on the other sidecar: the old token is stale
	// the moment the new acquire returns, wherever it is checked.
	old := l
	side := [2]*sc{a, b}
	for i := range 20 {
		side[i%2].release(old.LeaseID)
		for _, s := range side {
			if v := s.checkToken(obj, old.Token); v.Current || v.Token != 0 {
				t.Fatalf("round %d: check of released token %d through %s = %+v, want stale, object free", i, old.Token, s.cfg.NodeID, v)
			}
		}
		next := side[(i+1)%2].acquire(esc, `{"lease_ms":60000,"wait_ms":30000}`)
		if next.Token <= old.Token {
			t.Fatalf("round %d: new token %d not above the old %d", i, next.Token, old.Token)
		}
		for _, s := range side {
			if v := s.checkToken(obj, old.Token); v.Current || v.Token != next.Token {
				t.Fatalf("round %d: check of old token %d through %s right after the new grant = %+v, want stale with token %d", i, old.Token, s.cfg.NodeID, v, next.Token)
			}
			if v := s.checkToken(obj, next.Token); !v.Current {
				t.Fatalf("round %d: check of new token %d through %s = %+v, want current", i, next.Token, s.cfg.NodeID, v)
			}
		}
		old = next
	}
	side[0].release(old.LeaseID) // the 20th round's grant, through A
}

// TestCheckBadToken: a missing or malformed token is a 400 naming "token"
// (and an unknown parameter one naming it); a bad object one naming
// "object".
func TestCheckBadToken(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "sc-a"))
	for _, q := range []string{"", "?token=", "?token=abc", "?token=0", "?token=-1", "?token=%2B5", "?token=1.5", "?token=0x10",
		"?token=9223372036854775808", "?token=1&token=2", "?other=1&token=1"} {
		st, b := s.call("GET", "/v1/locks/doc/check"+q, "")
		want := "token"
		if q == "?other=1&token=1" {
			want = "other"
		}
		if e := decodeError(t, b); st != 400 || e.Kind != api.BadRequest || e.Field != want {
			t.Errorf("check%s = %d %s, want 400 BadRequest naming %q", q, st, b, want)
		}
	}
	if st, b := s.call("GET", "/v1/locks/bad%00name/check?token=1", ""); st != 400 || decodeError(t, b).Field != "object" {
		t.Errorf("check of a bad object name = %d %s, want 400 naming object", st, b)
	}
	if st, b := s.call("POST", "/v1/locks/doc/check?token=1", ""); st != 405 {
		t.Errorf("POST check = %d %s, want 405", st, b)
	}
}
