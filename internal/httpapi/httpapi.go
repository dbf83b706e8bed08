// Package httpapi holds what the sidecar's handlers and the ops handler
// share: the error answer (status + api.Error body), JSON writing, and
// request-body decoding whose errors name the field at fault.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"

	"github.com/batonhq/baton/api"
)

// Error is an answer other than 2xx: a status and the JSON body.
type Error struct {
	Status int
	Body   api.Error
	Cause  error // for the log; may be nil
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.Status, e.Body.Kind, e.Body.Message, e.Cause)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Body.Kind, e.Body.Message)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Cause }

// New is an error answer of the kind's status.
func New(kind, format string, args ...any) *Error {
	return &Error{Status: api.Status(kind), Body: api.Error{Kind: kind, Message: fmt.Sprintf(format, args...)}}
}

// BadRequest is a 400 naming the field or parameter at fault.
func BadRequest(field, format string, args ...any) *Error {
	e := New(api.BadRequest, "%s: "+format, append([]any{field}, args...)...)
	e.Body.Field = field
	return e
}

// WriteJSON writes v as the answer with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	e := encoders.Get().(*encoder)
	defer e.put()
	e.buf.Reset()
	if a, ok := v.(Appender); ok {
		if b, ok := a.AppendJSON(e.buf.AvailableBuffer()); ok {
			e.buf.Write(append(b, '\n')) // (b is e.buf's own spare room: no copy of substance)
			writeBody(w, status, e.buf.Bytes())
			return
		}
	}
	if err := e.enc.Encode(v); err != nil { // our own types: cannot happen
		status = http.StatusInternalServerError
		e.buf.Reset()
		_ = e.enc.Encode(api.Error{Kind: api.InternalError, Message: "encoding the answer: " + err.Error()})
	}
	writeBody(w, status, e.buf.Bytes())
}

// Appender is a value that appends its JSON encoding to b by hand: the
// same bytes as encoding/json's Encoder writes for it (without the
// newline), or false to leave it to encoding/json.
type Appender interface {
	AppendJSON(b []byte) ([]byte, bool)
}

// writeBody writes an encoded answer with WriteJSON's headers.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	h["Cache-Control"] = noStore
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// encoder is a buffer and a json.Encoder on it, kept in encoders between
// answers: Encode writes what json.Marshal returns, and the newline, with
// no allocation of its own.
type encoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var encoders = sync.Pool{New: func() any {
	e := new(encoder)
	e.enc = json.NewEncoder(&e.buf)
	return e
}}

// put returns e to encoders, unless a large answer (a long listing) grew
// its buffer: that one is left to the collector.
func (e *encoder) put() {
	if e.buf.Cap() <= 64<<10 {
		encoders.Put(e)
	}
}

// The values of WriteJSON's headers, shared by every answer (net/http only
// reads them): Header.Set allocated a slice for each, per answer.
var (
	contentTypeJSON = []string{"application/json"}
	noStore         = []string{"no-store"}
)

// DecodeBody reads a JSON object into v: at most api.MaxBody bytes (else
// 413), unknown fields refused, keys matched exactly (case-sensitive) and
// each at most once, an empty body meaning {}, whatever the Content-Type.
// An integer field tagged ",string" (a fencing token) takes a decimal string
// or a whole JSON number. Every refusal is a 400 naming the field.
func DecodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if bb, ok := r.Body.(*BufferedBody); ok && len(bb.b)-bb.off <= api.MaxBody {
		return DecodeJSON(bb.take(), v)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, api.MaxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			e := New(api.PayloadTooLarge, "body: over %d bytes (1 MiB)", api.MaxBody)
			e.Body.Field = "body"
			return e
		}
		return BadRequest("body", "reading the body: %v", err)
	}
	return DecodeJSON(body, v)
}

// DecodeJSON is DecodeBody's decoding of an already read body.
func DecodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if decodeFlat(body, v) {
		return nil
	}
	return decodeStrict(body, v)
}

// decodeStrict is DecodeJSON for any body: the key walk (checkKeys), then
// encoding/json.
func decodeStrict(body []byte, v any) error {
	whole := json.Valid(body) // one value and nothing after it (checkKeys keeps it so)
	if t := reflect.TypeOf(v); t != nil && t.Kind() == reflect.Pointer {
		checked, err := checkKeys(body, t.Elem(), whole)
		if err != nil {
			return err
		}
		body = checked
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if whole {
		return nil
	}
	if _, err := dec.Token(); err != io.EOF {
		return BadRequest("body", "trailing data after the JSON object")
	}
	return nil
}

func jsonError(err error) error {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return BadRequest("body", "malformed JSON at byte %d: %v", se.Offset, se)
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if te.Field == "" {
			return BadRequest("body", "want a JSON object, got %s", te.Value)
		}
		return BadRequest(te.Field, "want %s, got JSON %s", jsonKind(te.Type.String()), te.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if name == `""` {
			return BadRequest("body", `an empty key "" (no field has that name)`)
		}
		return BadRequest(strings.Trim(name, `"`), "unknown field (the accepted fields are in the API reference: GET /v1/openapi.json)")
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return BadRequest("body", "malformed JSON: unexpected end of input")
	}
	return BadRequest("body", "malformed JSON: %v", err)
}

func jsonKind(goType string) string {
	switch strings.TrimPrefix(goType, "*") {
	case "int64", "int":
		return "a whole number"
	case "string":
		return "a string"
	}
	return goType
}

// callerKey carries a description of a request's caller (uid and pid, from
// SO_PEERCRED) for audit lines written outside the sidecar package.
type callerKey struct{}

// WithCaller returns ctx carrying who, a description of the caller for
// audit lines (e.g. "uid=1000 pid=42").
func WithCaller(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, callerKey{}, who)
}

// Caller returns the caller description WithCaller put in ctx, or
// "unknown" when there is none.
func Caller(ctx context.Context) string {
	if who, ok := ctx.Value(callerKey{}).(string); ok && who != "" {
		return who
	}
	return "unknown"
}

// Route is one endpoint a package serves on the sidecar's API (the op
// dispatcher's /v1/ops endpoints): a method, a path pattern whose "{name}"
// segments the sidecar's router sets as path values, and the handler. The
// sidecar routes, authorizes and answers the handler's error.
type Route struct {
	Method, Pattern string
	Handle          func(http.ResponseWriter, *http.Request) error
}

// BufferedBody is a request body already in memory (the sidecar's lean
// HTTP/1.1 path reads a short body with the request's head): DecodeBody
// decodes its bytes where they are, without io.ReadAll's copy.
type BufferedBody struct {
	b   []byte
	off int
}

// NewBufferedBody returns a body reading b (which it keeps).
func NewBufferedBody(b []byte) *BufferedBody { return &BufferedBody{b: b} }

func (bb *BufferedBody) Read(p []byte) (int, error) {
	if bb.off >= len(bb.b) {
		return 0, io.EOF
	}
	n := copy(p, bb.b[bb.off:])
	bb.off += n
	return n, nil
}

// Close does nothing: the bytes are the collector's.
func (bb *BufferedBody) Close() error { return nil }

// take returns the unread bytes; the body then reads as ended.
func (bb *BufferedBody) take() []byte {
	b := bb.b[bb.off:]
	bb.off = len(bb.b)
	return b
}
