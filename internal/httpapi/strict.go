package httpapi

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Why a pre-check and not another decoder: encoding/json matches object keys
// to fields case-insensitively and lets a later duplicate key overwrite an
// earlier one, so {"PREEMPT":true,"preempt":false,"preempt":true} decodes
// as preempt=true. encoding/json/v2 (and its go-json-experiment/json
// prototype) is strict about both, but it is behind GOEXPERIMENT in Go 1.26
// and the prototype's API is not stable; the request types are small flat
// structs, so a walk over the object keys against their json tags is
// small (no dependency) and keeps encoding/json's decoding (and its error
// texts) for everything else.

// checkKeys walks the JSON value in body against t (the type it is decoded
// into) and refuses, naming the field: an object key that is not exactly a
// field's json name (a case-insensitive match is an unknown field, with the
// right name suggested); a key given twice in one object; for an integer
// field tagged ",string" (a fencing token), a value that is neither a
// decimal string nor a whole JSON number in range. A JSON number in such a
// field is accepted: the returned body has it quoted, so that
// encoding/json decodes it. Objects of other types (maps, json.RawMessage
// such as an op's payload, types with their own UnmarshalJSON) are not
// looked into. A body that is not well-formed JSON is returned unchanged,
// with no error: the decoder reports it.
//
// whole says that body is one well-formed JSON value (json.Valid), as all
// but broken bodies are: then it is walked as it is, else its first value
// is found first.
func checkKeys(body []byte, t reflect.Type, whole bool) ([]byte, error) {
	// The first JSON value, checked well-formed first (the walk reads
	// only well-formed JSON); what follows it is the decoder's to refuse.
	raw, start, end := body, 0, len(body)
	if !whole {
		first := json.NewDecoder(bytes.NewReader(body))
		var rm json.RawMessage
		if err := first.Decode(&rm); err != nil {
			return body, nil // the decoder says where it is broken
		}
		end = int(first.InputOffset())
		start, raw = end-len(rm), rm
	}
	w := &keyWalker{b: raw}
	if err := w.value(t, ""); err != nil {
		return nil, err
	}
	if len(w.quote) == 0 {
		return body, nil
	}
	out := make([]byte, 0, len(body)+2*len(w.quote))
	out = append(out, body[:start]...)
	last := 0
	for _, q := range w.quote {
		out = append(out, raw[last:q[0]]...)
		out = append(out, '"')
		out = append(out, raw[q[0]:q[1]]...)
		out = append(out, '"')
		last = q[1]
	}
	out = append(out, raw[last:]...)
	return append(out, body[end:]...), nil
}

// keyWalker reads one well-formed JSON value (checkKeys made sure) byte by
// byte: a scan of the bytes, where json.Decoder's tokens cost an
// allocation or two each.
type keyWalker struct {
	b     []byte   // well-formed JSON
	i     int      // the next byte to read
	quote [][2]int // byte ranges of numbers to quote, in order
}

// peek skips whitespace and returns the next byte.
func (w *keyWalker) peek() byte {
	for ; w.i < len(w.b); w.i++ {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return w.b[w.i]
	}
	return 0
}

// more reports whether another element or member follows in the array or
// object being read, reading the comma before it; at the end it leaves
// the closing bracket to be read.
func (w *keyWalker) more() bool {
	switch w.peek() {
	case ',':
		w.i++
		return true
	case ']', '}':
		return false
	}
	return true
}

// literal reads the string at w.i and returns it, quotes included.
func (w *keyWalker) literal() []byte {
	start := w.i
	for w.i++; w.b[w.i] != '"'; w.i++ {
		if w.b[w.i] == '\\' {
			w.i++
		}
	}
	w.i++
	return w.b[start:w.i]
}

// unquote is the string a string literal stands for, as encoding/json
// decodes it (escapes, invalid UTF-8 replaced).
func unquote(lit []byte) string {
	if bytes.IndexByte(lit, '\\') < 0 && utf8.Valid(lit) {
		return string(lit[1 : len(lit)-1])
	}
	var s string
	_ = json.Unmarshal(lit, &s) // well-formed
	return s
}

// skip reads one value.
func (w *keyWalker) skip() {
	for depth := 0; ; {
		switch w.peek() {
		case '"':
			w.literal()
		case '{', '[':
			depth++
			w.i++
		case '}', ']':
			depth--
			w.i++
		case ',', ':':
			w.i++
			continue
		case 0: // the end: not in well-formed JSON
			return
		default: // a number, true, false or null
			for w.i < len(w.b) && !strings.ContainsRune(" \t\n\r,:]}", rune(w.b[w.i])) {
				w.i++
			}
		}
		if depth == 0 {
			return
		}
	}
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// opaque reports whether values of t are not walked: t decodes itself, or
// is not a struct or a list of them.
func opaque(t reflect.Type) bool {
	if t == nil {
		return true
	}
	return t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType)
}

// value reads one JSON value that decodes into t; path is its field path
// ("" at the top, "a.b" below) for error messages.
func (w *keyWalker) value(t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch c := w.peek(); {
	case c == '{' && !opaque(t) && t.Kind() == reflect.Struct:
		return w.object(fieldsOf(t), path)
	case c == '[' && !opaque(t) && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		w.i++
		for w.more() {
			if err := w.value(t.Elem(), path); err != nil {
				return err
			}
		}
		w.i++ // ]
		return nil
	}
	w.skip() // a scalar (the decoder checks its type), or a value not looked into
	return nil
}

func (w *keyWalker) object(fields map[string]field, path string) error {
	w.i++ // {
	seen := map[string]bool{}
	for w.more() {
		w.peek()
		key := unquote(w.literal())
		w.peek()
		w.i++ // :
		name := key
		if path != "" {
			name = path + "." + key
		}
		f, known := fields[key]
		switch {
		case key == "":
			return BadRequest(joinPath(path, "body"), `an empty key "" (no field has that name)`)
		case !known:
			for k := range fields {
				if strings.EqualFold(k, key) {
					return BadRequest(name, "unknown field: field names are case-sensitive; did you mean %q?", joinPath(path, k))
				}
			}
			return BadRequest(name, "unknown field (the accepted fields are in the API reference: GET /v1/openapi.json)")
		case seen[key]:
			return BadRequest(name, "given twice: each field may appear once in an object")
		}
		seen[key] = true
		if f.stringInt {
			if err := w.stringInt(name); err != nil {
				return err
			}
			continue
		}
		if err := w.value(f.typ, name); err != nil {
			return err
		}
	}
	w.i++ // }
	return nil
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// stringInt reads the value of an integer field tagged ",string": a
// decimal string, a whole JSON number (quoted in the output), or null.
func (w *keyWalker) stringInt(name string) error {
	bad := func(got string) error {
		return BadRequest(name, `want a decimal string like "81" (a whole JSON number is accepted too), got %s`, got)
	}
	c := w.peek()
	start := w.i
	w.skip()
	switch lit := w.b[start:w.i]; c {
	case 'n': // null
		return nil
	case '"':
		if v := unquote(lit); !decimal(v) {
			return bad(strconv.Quote(v))
		}
		return nil
	case '{':
		return bad("an object")
	case '[':
		return bad("an array")
	case 't', 'f':
		return bad(string(lit))
	default: // a number
		if !decimal(string(lit)) {
			return bad(string(lit))
		}
		w.quote = append(w.quote, [2]int{start, w.i})
		return nil
	}
}

// decimal reports whether s is an integer as JSON writes it (no leading
// zero, no plus sign, no fraction or exponent) that fits an int64.
func decimal(s string) bool {
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || len(digits) > 1 && digits[0] == '0' {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
}

// field is what checkKeys needs to know of a struct field.
type field struct {
	typ       reflect.Type
	stringInt bool // an integer with the ",string" option
	quoted    bool // the ",string" option, on any type
	index     int  // the struct's field number; -1 for one promoted from an embedded struct
}

var fieldCache sync.Map // reflect.Type → map[string]field

// fieldsOf returns the fields of struct type t by their JSON name, with
// the fields of untagged embedded structs promoted (as encoding/json does).
func fieldsOf(t reflect.Type) map[string]field {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]field)
	}
	m := map[string]field{}
	addFields(m, t)
	fieldCache.Store(t, m)
	return m
}

func addFields(m map[string]field, t reflect.Type) {
	var embedded []reflect.Type // promoted after the direct fields, which win
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := sf.Type
		if sf.Anonymous && name == "" {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				embedded = append(embedded, et)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if _, dup := m[name]; dup {
			continue // the outer field wins over a promoted one
		}
		f := field{typ: ft, index: i}
		bt := ft
		if bt.Kind() == reflect.Pointer {
			bt = bt.Elem()
		}
		for o := range strings.SplitSeq(opts, ",") {
			if o == "string" {
				f.quoted = true
				switch bt.Kind() {
				case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
					f.stringInt = true
				}
			}
		}
		m[name] = f
	}
	for _, et := range embedded {
		inner := map[string]field{}
		addFields(inner, et)
		for k, f := range inner {
			if _, ok := m[k]; !ok {
				f.index = -1
				m[k] = f
			}
		}
	}
}
