package props

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/knadh/koanf/v2"
)

func TestParsePropertiesJavaSyntax(t *testing.T) {
	in := strings.Join([]string{
		"# hash comment",                    // 1
		"! bang comment",                    // 2
		"   # indented comment = not a key", // 3
		"",                                  // 4
		"equals=1",                          // 5
		"colon:2",                           // 6
		"space 3",                           // 7
		"tab\t4",                            // 8
		"  spaced  =   5  ",                 // 9: leading blanks of the value go, trailing stay
		"long = one, \\",                    // 10: continuation
		"       two, \\",                    // 11
		"  three",                           // 12
		"uni = caf\\u00e9 \\u0041",          // 13: \uXXXX
		"a\\=b\\:c\\ d = sep",               // 14: escaped separators in the key
		"\\u006b\\u0065y = escaped key",     // 15: key made of escapes ("key")
		"\\#not-comment = hash",             // 16
		"esc = tab\\tnl\\nq\\q\\\\",         // 17: \t \n, \q stands for q, \\ is a backslash
		"empty =",                           // 18
		"bare",                              // 19: key without value
		"dollar = ${not.expanded}",          // 20
		"after = \\",                        // 21: continuation over a comment-looking line
		"  # part of the value",             // 22
		"utf8 = ünïcödé ✓",                  // 23
		"lead = \\  x",                      // 24: escaped leading space kept
		"last: end",                         // 25: no final newline
	}, "\n")
	want := []Property{
		{"equals", "1", 5},
		{"colon", "2", 6},
		{"space", "3", 7},
		{"tab", "4", 8},
		{"spaced", "5  ", 9},
		{"long", "one, two, three", 10},
		{"uni", "café A", 13},
		{"a=b:c d", "sep", 14},
		{"key", "escaped key", 15},
		{"#not-comment", "hash", 16},
		{"esc", "tab\tnl\nqq\\", 17},
		{"empty", "", 18},
		{"bare", "", 19},
		{"dollar", "${not.expanded}", 20},
		{"after", "# part of the value", 21},
		{"utf8", "ünïcödé ✓", 23},
		{"lead", "  x", 24},
		{"last", "end", 25},
	}
	for name, input := range map[string]string{
		"LF":   in,
		"CRLF": strings.ReplaceAll(in, "\n", "\r\n"),
		"CR":   strings.ReplaceAll(in, "\n", "\r"),
		"BOM":  "\xef\xbb\xbf" + in,
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ParseProperties([]byte(input))
			if err != nil {
				t.Fatalf("ParseProperties: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("ParseProperties =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestParsePropertiesDuplicateLastWins(t *testing.T) {
	got, err := ParseProperties([]byte("a=1\nb=2\na=3\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Property{{"a", "1", 1}, {"b", "2", 2}, {"a", "3", 3}}
	// the winner carries magiconair's value; earlier duplicates keep the scanner's
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestParsePropertiesSyntaxErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		line     int
		msg      string
	}{
		{"bad unicode", "a=1\nb=\\u12G4\n", 2, msgBadUnicode},
		{"short unicode", "a=1\n\nb=\\u12", 3, msgBadUnicode},
		{"backslash at EOF", "a=1\nb=x\\", 2, msgEOFEscape},
		{"empty key =", "a=1\n=x\nb=2\n", 2, msgEmptyKey},
		{"empty key :", "a=1\n  :x\n", 2, msgEmptyKey},
		{"key continuation", "a=1\nke\\\ny=2\n", 2, msgKeyContinuation},
		{"surrogate", "a=\\uD83D\\uDE00\n", 1, msgSurrogate},
		{"invalid utf8", "a=1\nb=\xff\n", 2, msgInvalidUTF8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseProperties([]byte(tc.in))
			se, ok := errors.AsType[*SyntaxError](err)
			if !ok {
				t.Fatalf("ParseProperties(%q) error = %v, want *SyntaxError", tc.in, err)
			}
			if se.Line != tc.line || se.Msg != tc.msg {
				t.Errorf("ParseProperties(%q) = line %d %q, want line %d %q", tc.in, se.Line, se.Msg, tc.line, tc.msg)
			}
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("errors.Is(%v, ErrSyntax) = false", err)
			}
		})
	}
}

func TestKoanfAdapter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.properties")
	if err := os.WriteFile(path, []byte("zookeeper.servers = h1:2181,h2:2181/baton\nzookeeper = top\nweird\\ key = v\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k := koanf.New(".")
	p := &Parser{}
	if err := k.Load(FileProvider(path), p); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"zookeeper.servers": "h1:2181,h2:2181/baton",
		"zookeeper":         "top", // flat keys: "a" and "a.b" coexist
		"weird key":         "v",
	} {
		if got := k.String(key); got != want {
			t.Errorf("k.String(%q) = %q, want %q", key, got, want)
		}
	}
	if len(p.Properties) != 3 || p.Properties[2].Line != 3 {
		t.Errorf("p.Properties = %v, want 3 definitions, the last on line 3", p.Properties)
	}
	out, err := p.Marshal(k.All())
	if err != nil {
		t.Fatal(err)
	}
	back, err := p.Unmarshal(out)
	if err != nil || !reflect.DeepEqual(back, k.All()) {
		t.Errorf("Unmarshal(Marshal(m)) = %v, %v; want %v (text %q)", back, err, k.All(), out)
	}
}

func TestEscape(t *testing.T) {
	for _, tc := range []struct{ in, key, value string }{
		{"plain", "plain", "plain"},
		{"a b", `a\ b`, "a b"},
		{" lead", `\ lead`, `\ lead`},
		{"k=v:w", `k\=v\:w`, "k=v:w"},
		{"#x", `\#x`, "#x"},
		{"!x", `\!x`, "!x"},
		{"t\tn\nr\rf\f", `t\tn\nr\rf\f`, `t\tn\nr\rf\f`},
		{`back\slash`, `back\\slash`, `back\\slash`},
		{"nul\x00", `nul\u0000`, `nul\u0000`},
		{"\ufeffbom", `\uFEFFbom`, `\uFEFFbom`},
		{"ü✓😀", "ü✓😀", "ü✓😀"},
	} {
		if got := EscapeKey(tc.in); got != tc.key {
			t.Errorf("EscapeKey(%q) = %q, want %q", tc.in, got, tc.key)
		}
		if got := EscapeValue(tc.in); got != tc.value {
			t.Errorf("EscapeValue(%q) = %q, want %q", tc.in, got, tc.value)
		}
	}
}
