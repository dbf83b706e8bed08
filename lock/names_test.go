package lock_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/batonhq/baton/lock"
)

// checkName is the escaping's property: a name is rejected, or it escapes
// to one flat node name that is not reserved and unescapes back to itself.
func checkName(t *testing.T, obj string) {
	t.Helper()
	name, err := lock.EscapeObject(obj)
	if err != nil {
		if lock.ValidateObject(obj) == nil {
			t.Fatalf("EscapeObject(%q) rejected a valid name: %v", obj, err)
		}
		return
	}
	back, err := lock.UnescapeObject(name)
	switch {
	case err != nil || back != obj:
		t.Fatalf("%q -> %q -> %q, %v", obj, name, back, err)
	case strings.Contains(name, "/"), name == ".", name == "..", name == "zookeeper", name == "privateLock" && obj != "privateLock":
		t.Fatalf("%q escaped to a nesting or reserved name %q", obj, name)
	}
	for i := 0; i < len(name); i++ { // only the safe set and escapes
		c := name[i]
		if !(c == '%' || c == '.' || c == '_' || c == ':' || c == '-' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			t.Fatalf("%q escaped to %q with byte %q", obj, name, c)
		}
	}
}

// Property test: random strings of bytes, runes and the dangerous set.
func TestObjectNameRoundTrip(t *testing.T) {
	alphabet := []rune("aZ09._:-/%\x00\n\u00fc\u2713 \U0001F600\x7f\u0085")
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b strings.Builder
		for range r.IntN(40) + 1 {
			if r.IntN(10) == 0 {
				b.WriteByte(byte(r.IntN(256))) // invalid UTF-8 sometimes
			} else {
				b.WriteRune(alphabet[r.IntN(len(alphabet))])
			}
		}
		checkName(t, b.String())
	}
	// identity on the safe set, other than the reserved names
	for _, obj := range []string{"article-42", "A.b_c:d-E", "P1", "...", "zookeeper2", "privateLock"} {
		if name, err := lock.EscapeObject(obj); err != nil || name != obj {
			t.Errorf("EscapeObject(%q) = %q, %v; want itself", obj, name, err)
		}
	}
	for obj, want := range map[string]string{".": "%2E", "..": "%2E.", "zookeeper": "%7Aookeeper", "a/b": "a%2Fb", "%": "%25"} {
		if name, err := lock.EscapeObject(obj); err != nil || name != want {
			t.Errorf("EscapeObject(%q) = %q, %v; want %q", obj, name, err, want)
		}
	}
	if _, err := lock.EscapeObject(strings.Repeat("é", 128)); err != nil { // 256 bytes
		t.Errorf("256-byte name rejected: %v", err)
	}
	if _, err := lock.EscapeObject(strings.Repeat("é", 128) + "x"); err == nil {
		t.Error("257-byte name accepted")
	}
	// non-canonical node names are refused, so one object has one node
	for _, name := range []string{"%2e", "%41", "a%2", "a/b", "%"} {
		if obj, err := lock.UnescapeObject(name); err == nil {
			t.Errorf("UnescapeObject(%q) = %q, want an error", name, obj)
		}
	}
}

func FuzzObjectName(f *testing.F) {
	for _, s := range []string{"article-42", "a/b", "..", ".", "zookeeper", "ü", "%25", "a\x00", strings.Repeat("x", 257)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, obj string) {
		checkName(t, obj)
		if utf8.ValidString(obj) && len(obj) > lock.MaxObjectBytes {
			if _, err := lock.EscapeObject(obj); err == nil {
				t.Fatalf("%d-byte name accepted", len(obj))
			}
		}
	})
}
