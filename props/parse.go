package props

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/knadh/koanf/v2"
	"github.com/magiconair/properties"
)

// Property is one key=value definition of a properties file.
type Property struct {
	Key   string // decoded (escapes resolved)
	Value string // decoded, leading whitespace removed, continuation lines joined
	Line  int    // 1-based line the definition (its logical line) starts on
}

// SyntaxError is a properties text that cannot be parsed.
type SyntaxError struct {
	File string // "" when parsing bytes that came from no file
	Line int    // 1-based
	Msg  string
}

// Error returns "file:line: msg" (or "line N: msg" without a file).
func (e *SyntaxError) Error() string {
	if e.File == "" {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

// ErrSyntax is matched by every *SyntaxError through errors.Is.
var ErrSyntax = errors.New("props: syntax error")

// Is makes errors.Is(err, ErrSyntax) true.
func (e *SyntaxError) Is(target error) bool { return target == ErrSyntax }

// syntax error kinds of the line scanner. Those marked "stricter" are
// accepted by magiconair/properties but rejected here, because magiconair
// would read them differently from Java or leak its lexer goroutine.
const (
	msgEOFEscape       = "backslash at the end of the file"
	msgBadUnicode      = `\u is not followed by 4 hex digits`
	msgEmptyKey        = "a line starts with a separator: empty key"                                   // stricter
	msgKeyContinuation = "a key is continued on the next line: not supported"                          // stricter
	msgSurrogate       = `\u escape of a UTF-16 surrogate: write the character itself (UTF-8)`         // stricter
	msgInvalidUTF8     = "invalid UTF-8 (properties files are read as UTF-8)"                          // stricter
	msgDisagree        = "internal error: magiconair/properties and the line scanner disagree on keys" // never seen in fuzzing
)

// normalize strips a UTF-8 byte order mark and turns CRLF and CR line ends
// into LF. magiconair/properties does not continue a line ending in a
// backslash before CRLF; after normalize it does.
func normalize(b []byte) string {
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	if bytes.IndexByte(b, '\r') < 0 {
		return string(b)
	}
	s := strings.ReplaceAll(string(b), "\r\n", "\n")
	return strings.ReplaceAll(s, "\r", "\n")
}

// ParseProperties parses Java .properties text, read as UTF-8: `#` and `!`
// comment lines, `=`, `:` or whitespace between key and value, lines
// continued by a trailing backslash, `\uXXXX` and `\t \n \r \f` escapes, any
// other escaped character standing for itself (so `\=` `\:` `\ ` `\#` in keys).
// `${...}` is kept literally. It returns the definitions in file order,
// duplicates included (the last one wins).
//
// The values come from github.com/magiconair/properties; a small scanner
// mirroring its lexer finds the line of each definition and rejects what it
// would misread: a key continued over lines, \u escapes of UTF-16
// surrogates, invalid UTF-8 and lines that start with a separator.
func ParseProperties(b []byte) ([]Property, error) {
	s := normalize(b)
	if !utf8.ValidString(s) {
		i := 0
		for i < len(s) {
			r, w := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && w == 1 {
				break
			}
			i += w
		}
		return nil, &SyntaxError{Line: 1 + strings.Count(s[:i], "\n"), Msg: msgInvalidUTF8}
	}
	props, err := scan(s)
	if err != nil {
		return nil, err
	}
	l := properties.Loader{Encoding: properties.UTF8, DisableExpansion: true}
	p, err := l.LoadBytes([]byte(s))
	if err != nil {
		return nil, &SyntaxError{Line: 1, Msg: err.Error()} // the scanner accepts only what magiconair accepts
	}
	m := p.Map()
	last := make(map[string]int, len(props))
	for i, pr := range props {
		last[pr.Key] = i
	}
	if len(last) != len(m) {
		return nil, &SyntaxError{Line: 1, Msg: msgDisagree}
	}
	for k, i := range last {
		v, ok := m[k]
		if !ok {
			return nil, &SyntaxError{Line: props[i].Line, Msg: msgDisagree}
		}
		props[i].Value = v
	}
	return props, nil
}

// scanner mirrors magiconair/properties' lexer (lex.go) on normalized text
// to find where each definition starts.
type scanner struct {
	s    string
	i    int
	line int
}

func (sc *scanner) peek() byte {
	if sc.i < len(sc.s) {
		return sc.s[sc.i]
	}
	return 0
}

func (sc *scanner) eof() bool { return sc.i >= len(sc.s) }

func (sc *scanner) skipBlanks() {
	for !sc.eof() && strings.IndexByte(" \t\f", sc.s[sc.i]) >= 0 {
		sc.i++
	}
}

func (sc *scanner) fail(line int, msg string) error { return &SyntaxError{Line: line, Msg: msg} }

// escape decodes the escape sequence after a backslash already consumed.
func (sc *scanner) escape(inKey bool) (rune, error) {
	if sc.eof() {
		return 0, sc.fail(sc.line, msgEOFEscape)
	}
	r, w := utf8.DecodeRuneInString(sc.s[sc.i:])
	sc.i += w
	switch r {
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case '\n':
		if inKey {
			return 0, sc.fail(sc.line, msgKeyContinuation)
		}
		sc.line++
		return '\n', nil
	case 'u':
		if len(sc.s)-sc.i < 4 {
			return 0, sc.fail(sc.line, msgBadUnicode)
		}
		var v rune
		for _, c := range []byte(sc.s[sc.i : sc.i+4]) {
			switch {
			case '0' <= c && c <= '9':
				v = v<<4 | rune(c-'0')
			case 'a' <= c && c <= 'f':
				v = v<<4 | rune(c-'a'+10)
			case 'A' <= c && c <= 'F':
				v = v<<4 | rune(c-'A'+10)
			default:
				return 0, sc.fail(sc.line, msgBadUnicode)
			}
		}
		sc.i += 4
		if 0xd800 <= v && v <= 0xdfff {
			return 0, sc.fail(sc.line, msgSurrogate)
		}
		return v, nil
	}
	return r, nil // any other escaped character stands for itself
}

// scan is ParseProperties' scanner: it splits s into key/value definitions
// with their line numbers, as magiconair/properties' lexer reads them, and
// rejects what that lexer would misread (see ParseProperties).
func scan(s string) ([]Property, error) {
	sc := &scanner{s: s, line: 1}
	var out []Property
	var key, val strings.Builder
	for {
		// Before a key: skip blank lines and whitespace, comments run to the end of the line.
		for !sc.eof() && strings.IndexByte(" \t\f\n", sc.peek()) >= 0 {
			if sc.peek() == '\n' {
				sc.line++
			}
			sc.i++
		}
		if sc.eof() {
			return out, nil
		}
		if c := sc.peek(); c == '#' || c == '!' {
			for !sc.eof() && sc.peek() != '\n' {
				sc.i++
			}
			continue
		}
		start := sc.line
		// The key runs to the first unescaped whitespace, ':' or '='.
		key.Reset()
		for !sc.eof() {
			c := sc.peek()
			if c == '\\' {
				sc.i++
				r, err := sc.escape(true)
				if err != nil {
					return nil, err
				}
				key.WriteRune(r)
				continue
			}
			if strings.IndexByte(" \t\f\n:=", c) >= 0 {
				break
			}
			r, w := utf8.DecodeRuneInString(sc.s[sc.i:])
			key.WriteRune(r)
			sc.i += w
		}
		if key.Len() == 0 {
			return nil, sc.fail(start, msgEmptyKey)
		}
		// Separator: blanks, at most one ':' or '=', blanks.
		sc.skipBlanks()
		if c := sc.peek(); c == ':' || c == '=' {
			sc.i++
		}
		sc.skipBlanks()
		// The value runs to the end of the line; backslash-newline continues it.
		val.Reset()
		for !sc.eof() {
			c := sc.peek()
			if c == '\n' {
				sc.i++
				sc.line++
				break
			}
			if c == '\\' {
				sc.i++
				if sc.peek() == '\n' {
					sc.i++
					sc.line++
					sc.skipBlanks()
					continue
				}
				r, err := sc.escape(false)
				if err != nil {
					return nil, err
				}
				val.WriteRune(r)
				continue
			}
			r, w := utf8.DecodeRuneInString(sc.s[sc.i:])
			val.WriteRune(r)
			sc.i += w
		}
		out = append(out, Property{Key: key.String(), Value: val.String(), Line: start})
	}
}

// Parser is a [koanf.Parser] for Java .properties text (see
// [ParseProperties]). Unmarshal returns a flat map: keys are not split at
// dots, because a properties file may hold both "a" and "a.b"; koanf's
// getters find flat keys whatever the delimiter. After Unmarshal, Properties
// holds the definitions with their lines. A Parser is not safe for
// concurrent use; use one per Load.
type Parser struct {
	Properties []Property // set by the last Unmarshal, in file order
}

var _ koanf.Parser = (*Parser)(nil)

// Unmarshal parses b; the map holds each key's last value as a string.
func (p *Parser) Unmarshal(b []byte) (map[string]any, error) {
	props, err := ParseProperties(b)
	if err != nil {
		return nil, err
	}
	p.Properties = props
	m := make(map[string]any, len(props))
	for _, pr := range props {
		m[pr.Key] = pr.Value
	}
	return m, nil
}

// Marshal writes m as properties text, one `key=value` line per key in
// sorted order, escaping what must be escaped so that Unmarshal returns m
// (values are formatted with %v). Empty keys and invalid UTF-8 are errors.
func (p *Parser) Marshal(m map[string]any) ([]byte, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		v := fmt.Sprint(m[k])
		if k == "" {
			return nil, errors.New("props: marshal: empty key")
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, fmt.Errorf("props: marshal %q: invalid UTF-8", k)
		}
		b.WriteString(EscapeKey(k))
		b.WriteByte('=')
		b.WriteString(EscapeValue(v))
		b.WriteByte('\n')
	}
	return []byte(b.String()), nil
}

// EscapeKey escapes a key for a properties file: backslash, whitespace, ':'
// and '=', a leading '#' or '!', control characters and U+FEFF.
func EscapeKey(k string) string { return escape(k, true) }

// EscapeValue escapes a value for a properties file: backslash, leading
// spaces, tab/newline/CR/FF, control characters and U+FEFF.
func EscapeValue(v string) string { return escape(v, false) }

func escape(s string, key bool) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\f':
			b.WriteString(`\f`)
		case r == ' ' && (key || i == 0):
			b.WriteString(`\ `)
		case key && (r == ':' || r == '='):
			b.WriteByte('\\')
			b.WriteRune(r)
		case key && i == 0 && (r == '#' || r == '!'):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || 0x7f <= r && r <= 0x9f || r == 0xfeff:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// FileProvider returns a [koanf.Provider] that reads the file at path, for a
// [Parser]: k.Load(props.FileProvider(path), &props.Parser{}).
func FileProvider(path string) koanf.Provider { return fileProvider(path) }

type fileProvider string

func (f fileProvider) ReadBytes() ([]byte, error) { return os.ReadFile(string(f)) }

func (f fileProvider) Read() (map[string]any, error) {
	return nil, errors.New("props: file provider needs a parser")
}
