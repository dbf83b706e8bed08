package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// Why a pre-check and not another decoder: encoding/json matches object keys
// to fields case-insensitively and lets a later duplicate key overwrite an
// earlier one, so {"PREEMPT":true,"preempt":false,"preempt":true} decodes
// as preempt=true. encoding/json/v2 (and its go-json-experiment/json
// prototype) is strict about both, but it is behind GOEXPERIMENT in Go 1.26
// and the prototype's API is not stable; the request types are small flat
// structs, so a token walk over the object keys against their json tags is
// small (no dependency) and keeps encoding/json's decoding (and its error
// texts) for everything else.

// errMalformed makes checkKeys leave the error to the decoder, whose
// message says where the JSON is broken.
var errMalformed = errors.New("malformed")

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
	// The first JSON value, checked well-formed first (a key read by the
	// walk is not yet known to be followed by a value); what follows it is
	// the decoder's to refuse.
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
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	w := &keyWalker{dec: dec}
	if err := w.value(t, ""); err != nil {
		if errors.Is(err, errMalformed) {
			return body, nil
		}
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

type keyWalker struct {
	dec   *json.Decoder
	quote [][2]int // byte ranges of numbers to quote, in order
}

func (w *keyWalker) token() (json.Token, error) {
	tok, err := w.dec.Token()
	if err != nil {
		return nil, errMalformed
	}
	return tok, nil
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
	tok, err := w.token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar: the decoder checks its type
	}
	switch {
	case d == '{' && !opaque(t) && t.Kind() == reflect.Struct:
		return w.object(fieldsOf(t), path)
	case d == '[' && !opaque(t) && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		for w.dec.More() {
			if err := w.value(t.Elem(), path); err != nil {
				return err
			}
		}
		_, err := w.token() // ]
		return err
	}
	return w.skip() // an object or array not looked into
}

// skip reads the rest of an object or array whose opening delimiter was read.
func (w *keyWalker) skip() error {
	for depth := 1; depth > 0; {
		tok, err := w.token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return nil
}

func (w *keyWalker) object(fields map[string]field, path string) error {
	seen := map[string]bool{}
	for w.dec.More() {
		tok, err := w.token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
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
	_, err := w.token() // }
	return err
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
	tok, err := w.token()
	if err != nil {
		return err
	}
	bad := func(got string) error {
		return BadRequest(name, `want a decimal string like "81" (a whole JSON number is accepted too), got %s`, got)
	}
	switch v := tok.(type) {
	case nil:
		return nil
	case string:
		if !decimal(v) {
			return bad(strconv.Quote(v))
		}
		return nil
	case json.Number:
		lit := v.String()
		if !decimal(lit) {
			return bad(lit)
		}
		end := int(w.dec.InputOffset())
		w.quote = append(w.quote, [2]int{end - len(lit), end})
		return nil
	case json.Delim:
		if err := w.skip(); err != nil {
			return err
		}
		if v == '{' {
			return bad("an object")
		}
		return bad("an array")
	default:
		return bad(fmt.Sprint(v))
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
		f := field{typ: ft}
		bt := ft
		if bt.Kind() == reflect.Pointer {
			bt = bt.Elem()
		}
		for o := range strings.SplitSeq(opts, ",") {
			if o == "string" {
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
				m[k] = f
			}
		}
	}
}
