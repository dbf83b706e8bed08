package httpapi

import (
	"reflect"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
)

// flatProbe has a field of every kind decodeFlat sets, and kinds it leaves
// to the strict path (a ",string" integer, a type with UnmarshalText, a
// list).
type flatProbe struct {
	S     string        `json:"s,omitempty"`
	B     bool          `json:"b"`
	I8    int8          `json:"i8"`
	I     int           `json:"i"`
	P32   *int32        `json:"p32"`
	Tok   int64         `json:"tok,string"`
	When  time.Time     `json:"when"`
	L     []string      `json:"l"`
	D     time.Duration `json:"d"` // an int64 kind: decoded as a number by both
	NoTag string
	//lint:ignore U1000 unexported on purpose: encoding/json ignores it, so must decodeFlat
	skip string
}

var flatTypes = []func() any{
	func() any { return new(api.AcquireRequest) },
	func() any { return new(api.RevokeRequest) },
	func() any { return new(api.OpRequest) },
	func() any { return new(flatProbe) },
}

// FuzzDecodeFlat: whatever decodeFlat accepts, the strict path accepts too
// and decodes to the same value; whatever it refuses, it leaves untouched.
func FuzzDecodeFlat(f *testing.F) {
	for _, s := range []string{
		`{"wait_ms":10000}`, `{"type":"background","info":"x","lease_ms":100}`, `{}`, ` { "wait_ms" : 0 } `,
		`{"wait_ms":1,"wait_ms":2}`, `{"WAIT_MS":1}`, `{"info":"caf\u00e9"}`, `{"wait_ms":1e3}`, `{"wait_ms":null}`,
		`{"wait_ms":99999999999999999999}`, `{"wait_ms":-0}`, `{"wait_ms":01}`, `{"preempt":true,"preemptible":false}`,
		`{"i8":127}`, `{"i8":128}`, `{"p32":-2147483648}`, `{"tok":"5"}`, `{"tok":5}`, `{"s":"a","b":true}x`,
		`{"NoTag":"y"}`, `{"skip":"z"}`, `{"when":"2026-01-01T00:00:00Z"}`, `{"d":5}`, `{"s":"a\"b"}`, `{"b":truex}`,
		`{"s":"a",}`, `{"l":["a"]}`, `{"object":"o","payload":{"a":1}}`, `{"wait_ms":5}{}`, "{\"s\":\"\x7f\"}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, mk := range flatTypes {
			got, zero := mk(), mk()
			if !decodeFlat([]byte(body), got) {
				if !reflect.DeepEqual(got, zero) {
					t.Fatalf("decodeFlat(%q) refused but changed %T: %+v", body, got, got)
				}
				continue
			}
			want := mk()
			if err := decodeStrict([]byte(body), want); err != nil {
				t.Fatalf("decodeFlat(%q) accepted into %T what the strict path refuses: %v", body, got, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decodeFlat(%q) = %+v, the strict path %+v", body, got, want)
			}
		}
	})
}

// TestDecodeFlatTakes: the bodies requests carry take the fast path (else
// it is dead code and FuzzDecodeFlat proves nothing); the others go strict.
func TestDecodeFlatTakes(t *testing.T) {
	for _, c := range []struct {
		body string
		fast bool
	}{
		{`{"wait_ms":10000}`, true},
		{`{"type":"background","info":"job 7","lease_ms":30000,"bind":"process"}`, true},
		{`{}`, true},
		{" {\n\t\"wait_ms\" : 0 ,\r\n\"preemptible\":true} ", true},
		{`{"wait_ms":-5}`, true}, // fast, and the handler refuses it as strictly
		{`{"wait_ms":1,"wait_ms":2}`, false},
		{`{"WAIT_MS":1}`, false},
		{`{"info":"caf\u00e9"}`, false},
		{`{"info":"café"}`, false},
		{`{"wait_ms":1e3}`, false},
		{`{"wait_ms":1.0}`, false},
		{`{"wait_ms":null}`, false},
		{`{"wait_ms":"5"}`, false},
		{`{"wait_ms":99999999999999999999}`, false},
		{`{"objects":["a","b"]}`, false},
		{`{"wait_ms":5} x`, false},
		{`{"wait_ms":5,}`, false},
		{`[]`, false},
	} {
		var r api.AcquireRequest
		if got := decodeFlat([]byte(c.body), &r); got != c.fast {
			t.Errorf("decodeFlat(%q) = %v, want %v", c.body, got, c.fast)
		}
	}
	var r api.AcquireRequest
	if !decodeFlat([]byte(`{"type":"background","info":"job 7","wait_ms":250,"preempt":true}`), &r) ||
		r.Type != "background" || r.Info != "job 7" || r.WaitMS == nil || *r.WaitMS != 250 || !r.Preempt {
		t.Errorf("decodeFlat: %+v", r)
	}
}
