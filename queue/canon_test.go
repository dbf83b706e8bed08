package queue

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzCanonicalJSON: canonicalJSON accepts exactly the valid JSON values,
// ignores insignificant whitespace, and is idempotent — so the body hash of
// a resubmission does not depend on formatting.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[true,null,"x<y\u00e9"]}`, `1.50`, `"\ud83d\ude00"`, `{"a":{}}`, `{"a":`, `[1,2] 3`, ``} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		canon, err := canonicalJSON([]byte(raw))
		if (err == nil) != json.Valid([]byte(raw)) {
			t.Fatalf("canonicalJSON(%q) error %v, json.Valid %v", raw, err, json.Valid([]byte(raw)))
		}
		if err != nil {
			return
		}
		again, err := canonicalJSON(canon)
		if err != nil || !bytes.Equal(again, canon) {
			t.Fatalf("not idempotent: %q -> %q -> %q (%v)", raw, canon, again, err)
		}
		var indented bytes.Buffer
		if err := json.Indent(&indented, []byte(raw), " ", "\t"); err != nil {
			t.Fatal(err)
		}
		if c2, err := canonicalJSON(indented.Bytes()); err != nil || !bytes.Equal(c2, canon) {
			t.Fatalf("whitespace changed the canonical form: %q -> %q, indented -> %q (%v)", raw, canon, c2, err)
		}
	})
}
