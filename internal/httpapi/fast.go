package httpapi

import (
	"encoding"
	"reflect"
	"strconv"
	"sync"
)

// decodeFlat is DecodeJSON's fast path for the bodies nearly every request
// carries: one flat JSON object such as {"wait_ms":10000} or
// {"type":"background","info":"job 7"}. Its keys must each be exactly the
// json name of a string, bool or integer field (or a pointer to an integer)
// of the struct v points to, each given once; its values plain: a string of
// printable ASCII without escapes, a JSON integer without fraction or
// exponent that fits the field, true or false. Such a body decodes the same
// under encoding/json and is accepted by checkKeys, so decodeFlat sets the
// fields and reports true. Anything else (an unknown or repeated key, a
// null, an escape, a non-ASCII byte, a nested value, a ",string" field, a
// number out of range, trailing data) makes it report false having changed
// nothing, and DecodeJSON's strict path decodes the body or names what is
// wrong, as before. It is only a shortcut: the answers are DecodeJSON's
// (FuzzDecodeFlat checks both ways on the same bodies).
//
// Why: the strict path (json.Valid, the key walk, a json.Decoder) cost
// about 10 µs of CPU per acquire in `baton serve` (perf, W1), as much as
// the rest of the acquire's parsing together.
func decodeFlat(body []byte, v any) bool {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return false
	}
	plan := flatPlanOf(rv.Elem().Type())
	if plan == nil {
		return false
	}
	// a first pass finds every value; fields are set only if all of the
	// body is plain (nothing is left half-decoded for the strict path)
	var found [flatMaxKeys]struct {
		f          *flatField
		start, end int // the value's bytes (a string's without its quotes)
	}
	n, i := 0, skipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false
	}
	i = skipWS(body, i+1)
	if i < len(body) && body[i] == '}' {
		i++
	} else {
		for {
			if n == flatMaxKeys || i >= len(body) || body[i] != '"' {
				return false
			}
			ks := i + 1
			ke := ks
			for ke < len(body) && isPlainKey(body[ke]) {
				ke++
			}
			if ke >= len(body) || body[ke] != '"' {
				return false
			}
			f := plan.field(body[ks:ke])
			if f == nil {
				return false // unknown, or a kind decoded strictly only
			}
			for _, p := range found[:n] {
				if p.f == f {
					return false // repeated: the strict path names it
				}
			}
			i = skipWS(body, ke+1)
			if i >= len(body) || body[i] != ':' {
				return false
			}
			i = skipWS(body, i+1)
			vs, ve, next, ok := f.scan(body, i)
			if !ok {
				return false
			}
			found[n].f, found[n].start, found[n].end = f, vs, ve
			n++
			i = skipWS(body, next)
			if i < len(body) && body[i] == ',' {
				i = skipWS(body, i+1)
				continue
			}
			if i < len(body) && body[i] == '}' {
				i++
				break
			}
			return false
		}
	}
	if skipWS(body, i) != len(body) {
		return false // trailing data: the strict path refuses it
	}
	// check every value fits before setting any
	for _, p := range found[:n] {
		if !p.f.fits(body[p.start:p.end]) {
			return false
		}
	}
	s := rv.Elem()
	for _, p := range found[:n] {
		p.f.set(s.Field(p.f.index), body[p.start:p.end])
	}
	return true
}

// flatMaxKeys bounds the keys decodeFlat takes (more: the strict path).
const flatMaxKeys = 12

// flatKind is what a field takes on the fast path.
type flatKind uint8

const (
	flatString flatKind = iota + 1
	flatBool
	flatInt    // int, int8 … int64
	flatIntPtr // *int64 and other pointers to a signed integer
)

// flatField is a struct field decodeFlat can set.
type flatField struct {
	index int
	kind  flatKind
	bits  int // an integer's size
}

// flatPlan is a struct type's fields by json name (nil: a type decodeFlat
// leaves to the strict path).
type flatPlan struct{ fields map[string]*flatField }

func (p *flatPlan) field(name []byte) *flatField { return p.fields[string(name)] }

var flatPlans sync.Map // reflect.Type → *flatPlan (nil for none)

var textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()

// customDecoded: encoding/json decodes a value of t by t's own method.
func customDecoded(t reflect.Type) bool {
	for _, u := range [...]reflect.Type{unmarshalerType, textUnmarshalerType} {
		if t.Implements(u) || reflect.PointerTo(t).Implements(u) {
			return true
		}
	}
	return false
}

// flatPlanOf returns t's plan: its fields by json name as the strict
// path's key walk knows them (fieldsOf). Fields of other kinds, ",string"
// ones and those promoted from an embedded struct are left out: a body
// naming one goes the strict way. A type with its own UnmarshalJSON has no
// plan.
func flatPlanOf(t reflect.Type) *flatPlan {
	if p, ok := flatPlans.Load(t); ok {
		return p.(*flatPlan)
	}
	p := buildFlatPlan(t)
	flatPlans.Store(t, p)
	return p
}

func buildFlatPlan(t reflect.Type) *flatPlan {
	if customDecoded(t) {
		return nil
	}
	p := &flatPlan{fields: map[string]*flatField{}}
	for name, sf := range fieldsOf(t) {
		if sf.index < 0 || sf.quoted {
			continue
		}
		f := &flatField{index: sf.index}
		ft := sf.typ
		switch ft.Kind() {
		case reflect.String:
			f.kind = flatString
		case reflect.Bool:
			f.kind = flatBool
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			f.kind, f.bits = flatInt, ft.Bits()
		case reflect.Pointer:
			switch ft.Elem().Kind() {
			case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
				f.kind, f.bits = flatIntPtr, ft.Elem().Bits()
			default:
				continue
			}
		default:
			continue
		}
		if customDecoded(ft) || ft.Kind() == reflect.Pointer && customDecoded(ft.Elem()) {
			continue
		}
		p.fields[name] = f
	}
	return p
}

// scan reads f's value at body[i:]: the value's bytes (a string's without
// its quotes) and where it ends, or ok false when it is not plain for f.
func (f *flatField) scan(body []byte, i int) (start, end, next int, ok bool) {
	switch f.kind {
	case flatString:
		if i >= len(body) || body[i] != '"' {
			return 0, 0, 0, false
		}
		j := i + 1
		for j < len(body) && body[j] >= 0x20 && body[j] < 0x7f && body[j] != '"' && body[j] != '\\' {
			j++
		}
		if j >= len(body) || body[j] != '"' {
			return 0, 0, 0, false
		}
		return i + 1, j, j + 1, true
	case flatBool:
		for _, lit := range [...]string{"true", "false"} {
			if len(body)-i >= len(lit) && string(body[i:i+len(lit)]) == lit && !isLiteralByte(body, i+len(lit)) {
				return i, i + len(lit), i + len(lit), true
			}
		}
		return 0, 0, 0, false
	default: // integers: -?(0|[1-9][0-9]*), nothing after that a number continues with
		j := i
		if j < len(body) && body[j] == '-' {
			j++
		}
		d := j
		for j < len(body) && body[j] >= '0' && body[j] <= '9' {
			j++
		}
		if j == d || (body[d] == '0' && j-d > 1) || j-d > 19 {
			return 0, 0, 0, false
		}
		if j < len(body) && (body[j] == '.' || body[j] == 'e' || body[j] == 'E') {
			return 0, 0, 0, false
		}
		return i, j, j, true
	}
}

// fits reports whether v (scanned) fits f: an integer within its size.
func (f *flatField) fits(v []byte) bool {
	if f.kind != flatInt && f.kind != flatIntPtr {
		return true
	}
	_, err := strconv.ParseInt(string(v), 10, f.bits)
	return err == nil
}

// set stores v (scanned, fitting) in fv.
func (f *flatField) set(fv reflect.Value, v []byte) {
	switch f.kind {
	case flatString:
		fv.SetString(string(v))
	case flatBool:
		fv.SetBool(v[0] == 't')
	case flatInt:
		n, _ := strconv.ParseInt(string(v), 10, f.bits)
		fv.SetInt(n)
	case flatIntPtr:
		n, _ := strconv.ParseInt(string(v), 10, f.bits)
		p := reflect.New(fv.Type().Elem())
		p.Elem().SetInt(n)
		fv.Set(p)
	}
}

// isPlainKey: the bytes of a key decodeFlat matches (json names are
// lower-case words with underscores; anything else goes the strict way).
func isPlainKey(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c >= 'A' && c <= 'Z'
}

// isLiteralByte: body[i] would continue a literal (truex is no true).
func isLiteralByte(body []byte, i int) bool {
	return i < len(body) && (body[i] >= 'a' && body[i] <= 'z' || body[i] >= 'A' && body[i] <= 'Z' || body[i] >= '0' && body[i] <= '9' || body[i] == '_')
}

// skipWS skips JSON whitespace from i.
func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
