package props

import (
	"maps"
	"strings"
	"testing"

	"github.com/magiconair/properties"
)

// onlyScannerRejects lists the syntax errors the scanner raises for input
// magiconair/properties would accept (misreading it) or choke on (leaking its
// lexer goroutine, for an empty key): magiconair is not asked about them.
var onlyScannerRejects = map[string]bool{
	msgEmptyKey: true, msgKeyContinuation: true, msgSurrogate: true, msgInvalidUTF8: true,
}

// FuzzParseProperties checks, for any input:
//   - ParseProperties never panics;
//   - it agrees with magiconair/properties: when it accepts, magiconair
//     accepts with the same key→value map; when it rejects for a reason
//     magiconair also has, magiconair rejects too;
//   - every definition's Line is right: parsing the text from the start of
//     that line yields that definition's key first;
//   - Marshal of the result parses back to the same map.
func FuzzParseProperties(f *testing.F) {
	for _, s := range []string{
		"a=1\nb : 2\nc 3\n", "# c\n! c\nk=v", "k = a\\\n   b\\\n c", "\\u0041\\=\\:\\ b = \\u00e9",
		"k=v\r\nk2=v2\\\r\n  cont", "\xef\xbb\xbfk=v", "=x", ":x\ny", "ke\\\ny", "k=\\uD800", "k=\\u12",
		"k=v\\", "k\\", "\\", "a=1\na=2", "  \t\fk\t=\tv\t", "k=${x}", "\\#k=v\n#k=w", "\n\n\nk\n", "k=\xff",
		"k=v\\\n", "k=v\\\n\\\n", "k\\u0020x=1", "\\\\=\\\\", "a\\\\\nb=c",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseProperties(data)
		if err != nil {
			se, ok := err.(*SyntaxError)
			if !ok {
				t.Fatalf("ParseProperties(%q) error %T %v, want *SyntaxError", data, err, err)
			}
			if se.Msg == msgDisagree {
				t.Fatalf("ParseProperties(%q): %v", data, err)
			}
			if !onlyScannerRejects[se.Msg] {
				l := properties.Loader{Encoding: properties.UTF8, DisableExpansion: true}
				if p, merr := l.LoadBytes([]byte(normalize(data))); merr == nil {
					t.Fatalf("ParseProperties(%q) = %v, but magiconair accepts it: %v", data, err, p.Map())
				}
			}
			return
		}
		m := lastWins(got)
		l := properties.Loader{Encoding: properties.UTF8, DisableExpansion: true}
		p, merr := l.LoadBytes([]byte(normalize(data)))
		if merr != nil || !maps.Equal(p.Map(), m) {
			t.Fatalf("ParseProperties(%q) = %q, magiconair = %v, %v", data, m, p, merr)
		}

		// Lines: the logical line of each definition starts at its Line.
		text := normalize(data)
		lines := strings.SplitAfter(text, "\n")
		for _, pr := range got {
			if pr.Line < 1 || pr.Line > len(lines) {
				t.Fatalf("%q: key %q on line %d of %d", data, pr.Key, pr.Line, len(lines))
			}
			rest, err := scan(strings.Join(lines[pr.Line-1:], ""))
			if err != nil || len(rest) == 0 || rest[0].Key != pr.Key {
				t.Fatalf("%q: key %q said to be on line %d, but that line starts %+v (%v)", data, pr.Key, pr.Line, rest, err)
			}
		}

		// Round trip through Marshal.
		mm := make(map[string]any, len(m))
		for k, v := range m {
			mm[k] = v
		}
		out, err := (&Parser{}).Marshal(mm)
		if err != nil {
			t.Fatalf("Marshal(%q): %v", m, err)
		}
		back, err := ParseProperties(out)
		if err != nil || !maps.Equal(lastWins(back), m) {
			t.Fatalf("ParseProperties(Marshal(%q)) = %q, %v (text %q)", m, lastWins(back), err, out)
		}
	})
}

// FuzzMarshalRoundTrip checks that any map of valid UTF-8, non-empty keys,
// written out as properties text with escapes, parses back to the same map,
// each key on the line Marshal put it.
func FuzzMarshalRoundTrip(f *testing.F) {
	f.Add("zookeeper.servers", "h:1/x", "a b=c:d", " lead\ttab\nnl", "#k", "\\u0041 ü😀\x00")
	f.Add("!", "", "\ufeff", "\r\f", "k", "${x}\\")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		m := map[string]any{}
		for _, kv := range [][2]string{{k1, v1}, {k2, v2}, {k3, v3}} {
			m[kv[0]] = kv[1]
		}
		p := &Parser{}
		out, err := p.Marshal(m)
		if err != nil {
			for k, v := range m {
				if k == "" || !utf8Valid(k) || !utf8Valid(v.(string)) {
					return // documented refusals
				}
			}
			t.Fatalf("Marshal(%q): %v", m, err)
		}
		back, err := p.Unmarshal(out)
		if err != nil || !maps.Equal(back, m) {
			t.Fatalf("Unmarshal(Marshal(%q)) = %q, %v (text %q)", m, back, err, out)
		}
		for i, pr := range p.Properties {
			if pr.Line != i+1 {
				t.Fatalf("key %q on line %d, want %d (text %q)", pr.Key, pr.Line, i+1, out)
			}
		}
	})
}

func lastWins(ps []Property) map[string]string {
	m := make(map[string]string, len(ps))
	for _, p := range ps {
		m[p.Key] = p.Value
	}
	return m
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\ufffd") == s }
