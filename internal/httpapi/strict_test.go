package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/batonhq/baton/api"
)

// topKeys returns the keys of the top-level JSON object in b, in order,
// or ok false when b is not a well-formed object.
func topKeys(b []byte) (keys []string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		keys = append(keys, t.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
	}
	return keys, true
}

// FuzzDecodeJSON: what DecodeJSON accepts has each top-level key once and
// exactly a field's json name, and decodes as encoding/json decodes it;
// a refusal is a 400 naming a field (or the body), never encoding/json's
// ",string" text.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"preempt":true}`, `{"PREEMPT":true,"preempt":false,"preempt":true}`, `{"wait_ms":1,"wait_ms":2}`,
		`{"type":"background","info":"x","lease_ms":100}`, `{"reason":"r","token":"5"}`, `{"token":5}`,
		`{"token":1.5}`, `{"token":"01"}`, `{"Token":"1"}`, `{"reason":"a","reason":"b"}`, `{}`, ``, `[]`,
		`{"object":"o","payload":{"a":1,"a":2}}`, `{"object":"o","OBJECT":"p"}`, `{"token":null}`, `{"token":-3}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, mk := range []func() any{
			func() any { return new(api.AcquireRequest) },
			func() any { return new(api.RevokeRequest) },
			func() any { return new(api.OpRequest) },
		} {
			got := mk()
			err := DecodeJSON([]byte(body), got)
			if err != nil {
				var he *Error
				if !errors.As(err, &he) || he.Status/100 != 4 || he.Body.Field == "" {
					t.Fatalf("DecodeJSON(%q) = %v, want a 4xx naming a field", body, err)
				}
				if strings.Contains(he.Body.Message, "struct tag") {
					t.Fatalf("DecodeJSON(%q) leaks encoding/json: %s", body, he.Body.Message)
				}
				continue
			}
			keys, ok := topKeys([]byte(body))
			if !ok {
				continue // empty body, null
			}
			fields := fieldsOf(reflect.TypeOf(got).Elem())
			seen := map[string]bool{}
			for _, k := range keys {
				if _, ok := fields[k]; !ok || seen[k] {
					t.Fatalf("DecodeJSON(%q) accepted key %q (known %v, repeated %v)", body, k, ok, seen[k])
				}
				seen[k] = true
			}
			if _, isRevoke := got.(*api.RevokeRequest); isRevoke {
				continue // a numeric token is quoted before encoding/json sees it
			}
			want := mk()
			if err := json.Unmarshal([]byte(body), want); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("DecodeJSON(%q) = %+v; encoding/json: %+v, %v", body, got, want, err)
			}
		}
	})
}

// TestDecodeJSONToken: a numeric token is the number it spells, a string
// token the same; both within int64.
func TestDecodeJSONToken(t *testing.T) {
	for body, want := range map[string]int64{
		`{"token":81}`: 81, `{"token":"81"}`: 81, `{"token": 9223372036854775807 }`: 9223372036854775807,
		`{"token":-1}`: -1, `{"reason":"x","token":0}`: 0, `{"token":null}`: 0,
	} {
		var r api.RevokeRequest
		if err := DecodeJSON([]byte(body), &r); err != nil || r.Token != want {
			t.Errorf("DecodeJSON(%s) = %d, %v; want %d", body, r.Token, err, want)
		}
	}
}
